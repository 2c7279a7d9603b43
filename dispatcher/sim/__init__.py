"""The policy lab: replay job traces through the same policy.schedule the live scheduler calls.

Pure like the policy: no Redis, no wall clock, no OS; a manual clock and a seeded
random.Random are passed in. Nothing under dispatcher/ branches on simulation:
the engine is one more driver of schedule(), as the live scheduler is.
"""

"""The live writer: the leader's loop, its mirror of the queue, the planner that commits a plan, node liveness, and the policy in force and changes to it."""

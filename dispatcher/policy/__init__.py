"""The pure policy core: who gets which GPUs this cycle.

Imports nothing from Redis, RQ, pynvml, time or os (tests/unit/test_layering.py
enforces it). The live scheduler, `dispatch why` and the simulator all call
`schedule` with a snapshot and the time, and act on the Plan it returns.

The names below are imported when first used (PEP 562), so that a caller that
needs one module of the package (`dispatch submit`'s check that some node could
ever hold the job: policy.verdicts) does not load the whole cycle.
"""

import importlib

_WHERE = {"PolicyConfig": "config", "Backlog": "backlog", "place_arrivals": "schedule", "plan_cycle": "schedule",
          "rest_verdict": "schedule", "schedule": "schedule"}

__all__ = ["Backlog", "PolicyConfig", "place_arrivals", "plan_cycle", "rest_verdict", "schedule"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

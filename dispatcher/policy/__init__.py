"""The pure policy core: who gets which GPUs this cycle.

Imports nothing from Redis, RQ, pynvml, time or os (tests/unit/test_layering.py
enforces it). The live scheduler, `dispatch why` and the simulator all call
`schedule.schedule` with a snapshot and the time, and act on the Plan it returns.

Only PolicyConfig is imported with the package: the views that read a policy file (`dispatch top`,
the board, most commands) need no more of it, and the cycle's modules cost ~50 ms to import. The
others load on first use (`from dispatcher.policy import Backlog`); the `schedule` function is
`dispatcher.policy.schedule.schedule` (the package's `schedule` is that module).
"""

from .config import PolicyConfig

_LAZY = {"Backlog": "backlog", "place_arrivals": "schedule", "plan_cycle": "schedule", "rest_verdict": "schedule"}

__all__ = ["Backlog", "PolicyConfig", "place_arrivals", "plan_cycle", "rest_verdict"]


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

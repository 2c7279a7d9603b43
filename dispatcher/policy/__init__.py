"""The pure policy core: who gets which GPUs this cycle.

Imports nothing from Redis, RQ, pynvml, time or os (tests/unit/test_layering.py
enforces it). The live scheduler, `dispatch why` and the simulator all call
`schedule` with a snapshot and the time, and act on the Plan it returns.
"""

from .config import PolicyConfig
from .backlog import Backlog
from .schedule import place_arrivals, plan_cycle, rest_verdict, schedule

__all__ = ["Backlog", "PolicyConfig", "place_arrivals", "plan_cycle", "rest_verdict", "schedule"]

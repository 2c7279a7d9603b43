"""The alerts' thresholds: pure data, parsed from the policy file's [alerts] table (policy/profiles.py)
and evaluated by views/alerts.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from .errors import ConfigError, InvalidRequestError
from .units import parse_duration


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds, set in the policy file's [alerts] table (one place, so the page, `top` and /metrics
    show the same alerts): ``critical_wait = "5m"``, ``low_util = 40``, ``low_util_for = "1h"``."""

    #: A critical job pending longer than this.
    critical_wait_s: float = 600.0
    #: A high job pending longer than this.
    high_wait_s: float = 1800.0
    #: Cluster allocation (GPUs held / usable GPUs, %) below this in every sample of low_util_for,
    #: while jobs waited in every one of them.
    low_util_pct: float = 50.0
    low_util_for_s: float = 1800.0
    #: No scheduler cycle published for this long, while there are nodes or jobs: nobody schedules (a
    #: standalone `dispatch scheduler` has no watchdog; `up`'s restarts a hung one after 60 s).
    scheduler_stale_s: float = 120.0
    # Idle GPUs have no threshold here: the idle_gpu alert shows the node agents' idle warnings,
    # whose thresholds are the policy's idle_util and idle_warn (dispatcher/policy/idle.py).

    @classmethod
    def from_table(cls, raw, key: str = "alerts") -> "AlertConfig":
        """From the policy file's [alerts] table (keys without their _s/_pct suffix; durations as "90s",
        "15m", "2h" or seconds); ConfigError names a bad key."""
        if not isinstance(raw, dict):
            raise ConfigError(f"{key}: must be a table of threshold = value", key=key)
        cfg = cls()
        names = {f.name.removesuffix("_s").removesuffix("_pct"): f.name for f in fields(cls)}
        for k, value in raw.items():
            where = f"{key}.{k}"
            if k == "idle_gpu_for":
                raise ConfigError(f"{where}: idle_gpu_for is the policy's idle_warn (docs/policy.md): one "
                                  "threshold for the jobs' idle warnings and this alert", key=where)
            name = names.get(k)
            if name is None:
                raise ConfigError(f"{where}: unknown threshold; known: {', '.join(sorted(names))}", key=where)
            try:
                if isinstance(value, bool):
                    raise ValueError
                number = float(value) if isinstance(value, (int, float)) else \
                    parse_duration(str(value).strip()) if name.endswith("_s") else float(str(value))
            except (InvalidRequestError, ValueError):
                number = -1.0
            if name.endswith("_pct") and number > 100:
                raise ConfigError(f"{where}: is a share of the GPUs in percent, at most 100, got {value!r}", key=where)
            if not (number > 0 and math.isfinite(number)):
                raise ConfigError(f"{where}: {value!r} must be a positive "
                                  f"{'duration (90s, 15m, 2h)' if name.endswith('_s') else 'number'}", key=where)
            cfg = replace(cfg, **{name: number})
        return cfg

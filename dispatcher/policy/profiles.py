"""Policy files: TOML text -> named profiles, a time-of-day schedule, and teams.

Pure: the caller reads the file and passes the local weekday and minute of the
day; nothing here reads a clock or a disk. Every mistake raises ConfigError
naming the key, e.g. `profiles.night.weights.wait: must be a number >= 0`.

    default_profile = "day"             # used when no [[schedule]] entry matches
    [defaults]                          # inherited by every profile
    aging_horizon = "2h"
    [profiles.day]
    weights = { priority = 1.0, wait = 0.12, fairness = 0.10, remaining = 0.06, fit = 0.04 }
    [profiles.night]                    # throughput: short jobs and tight packing first
    weights = { priority = 1.0, wait = 0.05, fairness = 0.05, remaining = 0.15, fit = 0.10 }
    [[schedule]]
    profile = "night"
    from = "20:00"                      # local time; may wrap past midnight
    to = "08:00"
    days = ["mon", "tue", "wed", "thu", "fri"]   # optional; default every day
    [teams.vision]
    guarantee_gpus = 4                  # capacity the team gets back first when it needs it
    limit_gpus = 8                      # never more than this at once
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields, replace

from ..core.alerts import AlertConfig
from ..core.errors import ConfigError, InvalidRequestError
from ..core.model import PRIORITIES
from ..core.units import parse_duration
from .config import WEIGHT_TERMS, PolicyConfig, TeamQuota

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DURATION_KEYS = {"aging_horizon": "aging_horizon_s", "remaining_ref": "remaining_ref_s",
                  "unknown_remaining": "unknown_remaining_s", "preempt_cooldown": "preempt_cooldown_s",
                  "min_run": "min_run_s", "idle_warn": "idle_warn_s"}
_INT_KEYS = {"reservations": "reservations", "reserve_min_gpus": "reserve_min_gpus",
             "forced_min_gap": "forced_min_gap", "preemptors_per_cycle": "preemptors_per_cycle", "starvation_reservations": "starvation_reservations"}
_BOOL_KEYS = {"preemption": "preemption", "keep_wait_on_requeue": "keep_wait_on_requeue"}
_PROFILE_KEYS = set(_DURATION_KEYS) | set(_INT_KEYS) | set(_BOOL_KEYS) | {"weights", "aging_cap", "starvation",
                                                                           "preempt_by", "las_tiers",
                                                                           "idle_util", "idle_requeue", "targets", "reserve",
                                                                           "class_step", "reserve_longest_wait"}
PREEMPT_BY = ("class", "class+attained", "attained", "remaining")


@dataclass(frozen=True)
class ScheduleEntry:
    profile: str
    from_min: int
    to_min: int
    days: frozenset[int] = frozenset(range(7))

    def spans(self) -> list[tuple[int, int]]:
        """The window as [start, end) minutes of the week (Monday 00:00 is 0); a wrap ends on the next day."""
        out = []
        for d in self.days:
            if self.from_min < self.to_min:
                out.append((d * 1440 + self.from_min, d * 1440 + self.to_min))
            elif self.from_min > self.to_min:
                after = (d + 1) % 7 * 1440  # (Sunday's night ends on Monday)
                out += [(d * 1440 + self.from_min, (d + 1) * 1440), (after, after + self.to_min)]
        return out

    def matches(self, weekday: int, minute: int) -> bool:
        if self.from_min <= self.to_min:
            return weekday in self.days and self.from_min <= minute < self.to_min
        # wraps past midnight: the part after midnight belongs to the day the window started
        if minute >= self.from_min:
            return weekday in self.days
        return minute < self.to_min and (weekday - 1) % 7 in self.days


@dataclass(frozen=True)
class PolicySet:
    profiles: dict[str, PolicyConfig] = field(default_factory=lambda: {"default": PolicyConfig()})
    default_profile: str = "default"
    schedule: tuple[ScheduleEntry, ...] = ()
    #: The [alerts] table: the thresholds every view's alerts use (core/alerts.py).
    alerts: AlertConfig = field(default_factory=AlertConfig)

    def config_at(self, weekday: int, minute: int) -> tuple[str, PolicyConfig]:
        """The profile in force on `weekday` (0 = Monday) at `minute` past local midnight."""
        for entry in self.schedule:
            if entry.matches(weekday, minute):
                return entry.profile, self.profiles[entry.profile]
        return self.default_profile, self.profiles[self.default_profile]


def _err(key: str, msg: str) -> ConfigError:
    return ConfigError(f"{key}: {msg}", key=key)


#: The largest weight or class step: scores add terms of up to 100 times their weights, and weights near
#: the float limit made them inf and nan (a score of nan ranks nothing). Only ratios between weights matter.
MAX_WEIGHT = 1e6


def _number(value, key: str, *, lo: float = 0.0, hi: float = math.inf, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise _err(key, f"must be {'a whole number' if integer else 'a number'} >= {lo:g}, got {value!r}")
    if not math.isfinite(value):  # nan compares false with everything: a score of nan ranks nothing
        raise _err(key, f"must be a finite number >= {lo:g}, got {value!r}")
    if value < lo:
        raise _err(key, f"must be >= {lo:g}, got {value!r}")
    if value > hi:
        raise _err(key, f"must be at most {hi:g} (only the ratios between weights matter), got {value!r}")
    return value


def _duration(value, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(_number(value, key, lo=0.0))
    if str(value).strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(str(value), flag=key)
    except InvalidRequestError:
        raise _err(key, f"{value!r} is not a duration; use e.g. 90s, 15m, 2h") from None


def _clock(value, key: str) -> int:
    try:
        h, m = str(value).split(":")
        h, m = int(h), int(m)
        if 0 <= h <= 24 and 0 <= m < 60 and h * 60 + m <= 1440:
            return h * 60 + m
    except ValueError:
        pass
    raise _err(key, f"{value!r} is not a time of day; use HH:MM, e.g. 20:00")


def _profile(raw: dict, key: str, base: PolicyConfig) -> PolicyConfig:
    if not isinstance(raw, dict):
        raise _err(key, "must be a table")
    unknown = set(raw) - _PROFILE_KEYS
    if unknown:
        raise _err(f"{key}.{sorted(unknown)[0]}", f"unknown setting; known: {', '.join(sorted(_PROFILE_KEYS))}")
    changes: dict = {}
    if "weights" in raw:
        changes["weights"] = _weights(raw["weights"], key, base)
    for name, attr in _DURATION_KEYS.items():
        if name in raw:
            changes[attr] = _duration(raw[name], f"{key}.{name}")
    if changes.get("remaining_ref_s") == 0:  # the remaining term is ref / (ref + estimate)
        raise _err(f"{key}.remaining_ref", "must be above 0: the run time a job scores 50 at")
    if "aging_cap" in raw:
        cap = _number(raw["aging_cap"], f"{key}.aging_cap")
        if cap > 100:
            raise _err(f"{key}.aging_cap", f"must be at most 100 (a term's range), got {cap!r}")
        changes["aging_cap"] = float(cap)
    for name, attr in _INT_KEYS.items():
        if name in raw:
            changes[attr] = _number(raw[name], f"{key}.{name}", integer=True)
    for name, attr in _BOOL_KEYS.items():
        if name in raw:
            if not isinstance(raw[name], bool):
                raise _err(f"{key}.{name}", f"must be true or false, got {raw[name]!r}")
            changes[attr] = raw[name]
    if "preempt_by" in raw:
        if raw["preempt_by"] not in PREEMPT_BY:
            raise _err(f"{key}.preempt_by", f"{raw['preempt_by']!r} is not one of {', '.join(PREEMPT_BY)}")
        changes["preempt_by"] = raw["preempt_by"]
    if "las_tiers" in raw:
        changes["las_thresholds_gpu_s"] = _las_tiers(raw["las_tiers"], key)
    if "reserve_longest_wait" in raw:  # a share of the class's target, or false / "never"
        v = raw["reserve_longest_wait"]
        off = v is False or str(v).strip().lower() == "never"
        changes["reserve_longest_wait"] = None if off else float(_number(v, f"{key}.reserve_longest_wait"))
    if "class_step" in raw:
        changes["class_step"] = float(_number(raw["class_step"], f"{key}.class_step", hi=MAX_WEIGHT))
    if "targets" in raw:  # each class's promise; its starvation bound is half of it unless given
        targets = _per_class(raw["targets"], f"{key}.targets")
        changes["targets_s"] = {**base.targets_s, **targets}
        changes["starvation_s"] = {**base.starvation_s, **{c: t / 2 for c, t in targets.items()}}
    if "reserve" in raw:  # GPUs kept for a class and those above it
        changes["reserve"] = {**base.reserve, **_per_class(raw["reserve"], f"{key}.reserve", "a number of GPUs")}
    if "starvation" in raw:
        changes["starvation_s"] = {**changes.get("starvation_s", base.starvation_s),
                                   **_per_class(raw["starvation"], f"{key}.starvation")}
    _idle(raw, key, changes)
    config = replace(base, **changes)
    if config.idle_requeue_s is not None and config.idle_requeue_s < config.idle_warn_s:
        raise _err(f"{key}.idle_requeue", f"{config.idle_requeue_s:g}s is shorter than idle_warn "
                                          f"({config.idle_warn_s:g}s): a job is warned before it is requeued")
    return config


def _weights(w, key: str, base: PolicyConfig) -> dict[str, float]:
    if not isinstance(w, dict):
        raise _err(f"{key}.weights", "must be a table of term = weight")
    for term, value in w.items():
        if term not in WEIGHT_TERMS:
            raise _err(f"{key}.weights.{term}", f"unknown term; known: {', '.join(WEIGHT_TERMS)}")
        _number(value, f"{key}.weights.{term}", hi=MAX_WEIGHT)
    weights = {**base.weights, **{k: float(v) for k, v in w.items()}}
    if sum(weights.values()) <= 0:
        raise _err(f"{key}.weights", "at least one weight must be above 0")
    return weights


def _las_tiers(tiers, key: str) -> tuple[float, ...]:
    """GPU time received, e.g. ["1h", "10h"] = 1 and 10 GPU-hours."""
    if not isinstance(tiers, list) or not tiers:
        raise _err(f"{key}.las_tiers", 'must be a list of GPU-time durations, e.g. ["1h", "10h"]')
    values = [_duration(t, f"{key}.las_tiers") for t in tiers]
    if values != sorted(values) or len(set(values)) != len(values):
        raise _err(f"{key}.las_tiers", "must be increasing")
    return tuple(values)


def _per_class(s, key: str, what: str = "duration") -> dict:
    if not isinstance(s, dict):
        raise _err(key, f"must be a table of class = {what}")
    for cls in s:
        if cls not in PRIORITIES:
            raise _err(f"{key}.{cls}", f"unknown class; use {', '.join(PRIORITIES)}")
    if what != "duration":
        return {c: _number(v, f"{key}.{c}", integer=True) for c, v in s.items()}
    return {c: _duration(v, f"{key}.{c}") for c, v in s.items()}


def _idle(raw: dict, key: str, changes: dict) -> None:
    """idle_util (percent, 0..100) and idle_requeue (a duration, or "never")."""
    if "idle_util" in raw:
        pct = _number(raw["idle_util"], f"{key}.idle_util")
        if pct > 100:
            raise _err(f"{key}.idle_util", f"is a utilization in percent, at most 100, got {pct!r}")
        changes["idle_util_pct"] = float(pct)
    if "idle_requeue" in raw:
        value = raw["idle_requeue"]
        never = value is False or str(value).strip().lower() == "never"
        changes["idle_requeue_s"] = None if never else _duration(value, f"{key}.idle_requeue")
        if changes["idle_requeue_s"] == 0:
            raise _err(f"{key}.idle_requeue", 'must be above 0; "never" turns idle requeues off')


def _teams(raw, key: str = "teams") -> dict[str, TeamQuota]:
    if not isinstance(raw, dict):
        raise _err(key, "must be a table of teams")
    teams = {}
    for name, t in raw.items():
        k = f"{key}.{name}"
        if not isinstance(t, dict):
            raise _err(k, "must be a table with guarantee_gpus and/or limit_gpus")
        unknown = set(t) - {"guarantee_gpus", "limit_gpus"}
        if unknown:
            raise _err(f"{k}.{sorted(unknown)[0]}", "unknown setting; known: guarantee_gpus, limit_gpus")
        g = _number(t.get("guarantee_gpus", 0), f"{k}.guarantee_gpus", integer=True)
        lim = t.get("limit_gpus")
        if lim is not None:
            lim = _number(lim, f"{k}.limit_gpus", integer=True)
            if lim < g:
                raise _err(f"{k}.limit_gpus", f"{lim} is below guarantee_gpus {g}")
        teams[name] = TeamQuota(guarantee_gpus=g, limit_gpus=lim)
    return teams


def parse_policy(text: str) -> PolicySet:
    """Parse and validate a policy file's text. Raises ConfigError naming the bad key."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", key="") from None
    known = {"alerts", "default_profile", "defaults", "profiles", "schedule", "teams"}
    unknown = set(raw) - known
    if unknown:
        raise _err(sorted(unknown)[0], f"unknown section; known: {', '.join(sorted(known))}")
    teams = _teams(raw.get("teams", {}))
    base = _profile(raw.get("defaults", {}), "defaults", replace(PolicyConfig(), teams=teams))
    profiles_raw = raw.get("profiles", {})
    if not isinstance(profiles_raw, dict):
        raise _err("profiles", "must be a table of profiles")
    profiles = {name: _profile(p, f"profiles.{name}", base) for name, p in profiles_raw.items()}
    if not profiles:
        profiles = {"default": base}
    default = raw.get("default_profile", "default" if "default" in profiles else next(iter(profiles)))
    if default not in profiles:
        raise _err("default_profile", f"no profile named {default!r}; profiles: {', '.join(profiles)}")
    entries = []
    sched = raw.get("schedule", [])
    if not isinstance(sched, list):
        raise _err("schedule", "must be an array of tables ([[schedule]])")
    for i, e in enumerate(sched):
        k = f"schedule[{i}]"
        if not isinstance(e, dict) or set(e) - {"profile", "from", "to", "days"} or \
                not {"profile", "from", "to"} <= set(e):
            raise _err(k, "needs profile, from and to (and optionally days)")
        if e["profile"] not in profiles:
            raise _err(f"{k}.profile", f"no profile named {e['profile']!r}; profiles: {', '.join(profiles)}")
        days = e.get("days", list(DAYS))
        if not isinstance(days, list) or any(str(d).lower()[:3] not in DAYS for d in days):
            raise _err(f"{k}.days", f"use day names: {', '.join(DAYS)}")
        if not days:
            raise _err(f"{k}.days", "is empty: the window would never apply (leave days out for every day)")
        entries.append(ScheduleEntry(e["profile"], _clock(e["from"], f"{k}.from"), _clock(e["to"], f"{k}.to"),
                                     frozenset(DAYS.index(str(d).lower()[:3]) for d in days)))
        _never_shadowed(entries, k, e["from"])
    return PolicySet(profiles, default, tuple(entries), AlertConfig.from_table(raw.get("alerts", {})))


def _never_shadowed(entries: list[ScheduleEntry], key: str, start) -> None:
    """The last of `entries` must apply some of the time: not empty, not covered by the earlier ones (the
    first window that matches wins)."""
    covered = bytearray(7 * 1440)
    for entry in entries[:-1]:
        for a, b in entry.spans():
            covered[a:b] = b"\1" * (b - a)
    spans = entries[-1].spans()
    if not spans:
        raise _err(key, f"from and to are both {start}: the window is empty (all day is 00:00 to 24:00)")
    if all(covered.find(0, a, b) == -1 for a, b in spans):
        raise _err(key, "never applies: the windows before it cover all of it (the first window that matches wins)")


def describe(config: PolicyConfig) -> dict:
    """A profile as plain data, for `dispatch policy show` and the decision log."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name == "teams":
            value = {t: {"guarantee_gpus": q.guarantee_gpus, "limit_gpus": q.limit_gpus} for t, q in value.items()}
        out[f.name] = value
    return out

"""The policies the simulator compares: ours, and the baselines from the literature.

Every one is a PolicyConfig for the same schedule(); none is special-cased.
Oracles are told the true (remaining) duration, whatever --est-error says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.errors import ConfigError
from ..policy.config import PolicyConfig
from .workload import EstimateModel

_FOREVER = 1e15  # an aging horizon no wait reaches: the wait term then orders by submit time alone
_PLAIN = dict(reservations=0, preemption=False, starvation_s={}, aging_horizon_s=_FOREVER)


@dataclass(frozen=True)
class SimPolicy:
    name: str
    config: PolicyConfig
    about: str
    oracle: bool = False  # sees true durations
    profiles: object = None  # a PolicySet (time-of-day profiles), for policy files

    def config_at(self):
        """What the engine runs: this policy's config, with multi-node gangs on, per simulated time."""
        if self.profiles is None:
            cfg = with_gangs(self.config)
            return lambda _t: cfg
        cache = {}

        def at(t: float) -> PolicyConfig:
            minute = int(t // 60)
            name, cfg = self.profiles.config_at((minute // 1440) % 7, minute % 1440)
            if name not in cache:
                cache[name] = with_gangs(cfg)
            return cache[name]
        return at


def _fifo(**kw) -> PolicyConfig:
    return replace(PolicyConfig(), **{"weights": {"wait": 1.0}, **_PLAIN, **kw})


BASELINES = {
    "fifo": SimPolicy("fifo", _fifo(), "submit order, work-conserving: a job that does not fit is skipped"),
    "fifo-strict": SimPolicy("fifo-strict", _fifo(head_of_line=True),
                             "submit order, stops at the first job that does not fit (YARN-CS)"),
    "fifo-easy": SimPolicy("fifo-easy", _fifo(reservations=1, hold_unknown_starts=True),
                           "submit order with EASY backfill on estimates"),
    "priority": SimPolicy("priority", _fifo(weights={"priority": 1.0, "wait": 1e-6}),
                          "static priority classes, submit order within a class"),
    "drf": SimPolicy("drf", _fifo(weights={"fairness": 1.0, "wait": 1e-6}),
                     "Dominant Resource Fairness across users, submit order within a user"),
    "sjf": SimPolicy("sjf", _fifo(weights={"remaining": 1.0}, remaining_ref_s=600.0),
                     "shortest job first (oracle: knows true durations)", oracle=True),
    "srtf": SimPolicy("srtf", _fifo(weights={"remaining": 1.0}, remaining_ref_s=600.0, preemption=True,
                                    preempt_by="remaining", min_run_s=0.0, preempt_cooldown_s=0.0,
                                    preemptors_per_cycle=1_000_000),
                      "shortest remaining time first, preemptive (oracle)", oracle=True),
    "las": SimPolicy("las", _fifo(weights={"attained": 1.0, "wait": 1e-6}, preemption=True, preempt_by="attained",
                                  min_run_s=0.0, preempt_cooldown_s=0.0, preemptors_per_cycle=1_000_000),
                     "Tiresias-style discretized least attained service, preemptive, no estimates"),
}


def dispatch_policy(config: PolicyConfig | None = None) -> SimPolicy:
    return SimPolicy("dispatch", config or PolicyConfig(), "our policy (the live scheduler's default)")


def resolve(name: str, policy_files: dict | None = None) -> SimPolicy:
    """A built-in name, or a policy file the live scheduler accepts (`policy_files`: path -> PolicySet,
    read by the caller; the file's time-of-day schedule runs on simulated time)."""
    if name == "dispatch":
        return dispatch_policy()
    if name in BASELINES:
        return BASELINES[name]
    if policy_files and name in policy_files:
        pset = policy_files[name]
        return SimPolicy(name, pset.profiles[pset.default_profile], f"policy file {name}", profiles=pset)
    raise ConfigError(f"unknown policy {name!r}; built in: dispatch, {', '.join(BASELINES)}, "
                      f"or the path of a policy file (.toml)", key="--policy")


def estimates_for(policy: SimPolicy, requested: EstimateModel) -> EstimateModel:
    return EstimateModel("oracle") if policy.oracle else requested


def with_gangs(config: PolicyConfig) -> PolicyConfig:
    """The simulator runs multi-node gangs on whole nodes, as traces ask."""
    return replace(config, gang_across_nodes=True)

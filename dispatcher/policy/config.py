"""The policy's knobs. Frozen; the default works with no policy file."""

from __future__ import annotations

from dataclasses import dataclass, field

#: The score terms a weight can be given to, in the order they are reported.
WEIGHT_TERMS = ("priority", "wait", "fairness", "remaining", "fit")


def _default_weights() -> dict[str, float]:
    return {"priority": 0.45, "wait": 0.25, "fairness": 0.15, "remaining": 0.10, "fit": 0.05}


def _default_starvation() -> dict[str, float]:
    return {}


@dataclass(frozen=True)
class TeamQuota:
    #: GPUs the team gets back first whenever it has work waiting (YARN capacity-style).
    guarantee_gpus: int = 0
    #: The most GPUs the team may hold at once (Kubernetes ResourceQuota-style); None = no limit.
    limit_gpus: int | None = None


@dataclass(frozen=True)
class PolicyConfig:
    #: Weight of each score term; terms are 0..100 and the score is their weighted mean, so 0..100 too.
    weights: dict[str, float] = field(default_factory=_default_weights)
    #: Waiting this long gives the full wait term (linear aging, capped at aging_cap).
    aging_horizon_s: float = 7200.0
    #: The most the wait term can reach, 0..100.
    aging_cap: float = 100.0
    #: A job estimated to run this long gets half the remaining-time term.
    remaining_ref_s: float = 3600.0
    #: How many blocked jobs at the head of the order get a reservation (EASY backfill: 1).
    reservations: int = 1
    #: What the policy assumes for a running job with no estimate, or one past its estimate.
    unknown_remaining_s: float = 86400.0
    #: Per class: a job waiting longer than this is served before every other job (start or reservation).
    starvation_s: dict[str, float] = field(default_factory=_default_starvation)
    #: Per team: guarantee and limit, in GPUs. Teams not listed have neither.
    teams: dict[str, TeamQuota] = field(default_factory=dict)

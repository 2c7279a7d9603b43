"""The policy's knobs. Frozen; the default works with no policy file."""

from __future__ import annotations

from dataclasses import dataclass, field


def _default_weights() -> dict[str, float]:
    return {"priority": 0.45, "wait": 0.25, "fairness": 0.15, "remaining": 0.10, "fit": 0.05}


@dataclass(frozen=True)
class PolicyConfig:
    #: Weight of each score term; terms are 0..100, so the total is 0..100 when weights sum to 1.
    weights: dict[str, float] = field(default_factory=_default_weights)
    #: Waiting this long gives the full wait term (linear aging, capped).
    aging_horizon_s: float = 7200.0
    #: A job estimated to run this long gets half the remaining-time term.
    remaining_ref_s: float = 3600.0
    #: How many blocked jobs at the head of the order get a reservation (EASY backfill: 1).
    reservations: int = 1
    #: What the policy assumes for a running job with no estimate, or one past its estimate.
    unknown_remaining_s: float = 86400.0

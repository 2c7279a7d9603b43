"""The terms of the dynamic score. Each is a pure function with a range of [0, 100].

score = Σ weight[term] * term / Σ weight, weights from PolicyConfig, so the score is in
[0, 100] too (weighted). static_terms gives a pending job's terms that depend neither on the node
nor on other jobs; the cycle adds fairness (dominant_share) and fit (fit.fit_score).
"""

from __future__ import annotations

import bisect

from ..core.model import PRIORITIES
from ..core.plan import PendingJob
from .config import PolicyConfig


def priority_term(rank: int) -> float:
    """100 * rank / (classes - 1): low 0, normal 33.3, high 66.7, critical 100."""
    return 100.0 * rank / (len(PRIORITIES) - 1)


def wait_term(wait_s: float, horizon_s: float) -> float:
    """Linear aging, capped: 100 * min(1, wait / horizon); a negative wait counts as 0."""
    if horizon_s <= 0:
        return 100.0
    return 100.0 * min(1.0, max(0.0, wait_s) / horizon_s)


def remaining_term(est_s: float | None, ref_s: float) -> float:
    """Shorter jobs first: 100 * ref / (ref + est). Unknown estimate -> 50 (as if est == ref)."""
    if est_s is None:
        return 50.0
    return 100.0 * ref_s / (ref_s + max(0.0, est_s))


def fairness_term(dominant_share: float) -> float:
    """Dominant Resource Fairness: 100 * (1 - dominant share), share clamped to [0, 1]."""
    return 100.0 * (1.0 - min(1.0, max(0.0, dominant_share)))


def dominant_share(used: tuple[float, float, float], total: tuple[float, float, float]) -> float:
    """max over (GPUs, CPUs, memory) of used / total, ignoring resources the cluster lacks."""
    return max((u / t for u, t in zip(used, total) if t > 0), default=0.0)


def las_tier(attained_gpu_s: float, thresholds_gpu_s) -> int:
    """How many of the (increasing) thresholds the job's received GPU-seconds have passed."""
    return bisect.bisect_right(thresholds_gpu_s, attained_gpu_s)


def attained_term(attained_gpu_s: float, thresholds_gpu_s) -> float:
    """Least attained service, discretized (Tiresias): 100 * (1 - tier / tiers) (las_tier). 100 for
    a fresh job."""
    return 100.0 * (1.0 - las_tier(attained_gpu_s, thresholds_gpu_s) / max(1, len(thresholds_gpu_s)))


def static_terms(job: PendingJob, now_ms: int, config: PolicyConfig) -> dict[str, float]:
    """The score terms that do not depend on the node or on other jobs."""
    spec = job.spec
    terms = {
        "priority": priority_term(spec.rank),
        "wait": min(config.aging_cap, wait_term((now_ms - job.wait_from_ms) / 1000.0, config.aging_horizon_s)),
        "remaining": remaining_term(spec.est_s, config.remaining_ref_s),
    }
    if config.weights.get("attained"):
        terms["attained"] = attained_term(job.attained_gpu_s, config.las_thresholds_gpu_s)
    return terms


def weighted(terms: dict[str, float], weights: dict[str, float]) -> float:
    """The weighted mean of the terms present: Σ w·t / Σ w over all weights, so 0..100."""
    total = sum(weights.values()) or 1.0
    return sum(weights.get(k, 0.0) * v for k, v in terms.items()) / total

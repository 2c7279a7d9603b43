"""Each class's promise: the longest a job of it should wait (`PolicyConfig.targets_s`).

A job past its class's starvation bound (by default half its target) goes ahead of every
class: the oldest starving jobs start, or hold a reservation, before anything else
(schedule.py). Pure.
"""

from __future__ import annotations

from .config import PolicyConfig


def promise(priority: str, waited_s: float, config: PolicyConfig) -> dict | None:
    """How far a job of `priority` that has waited `waited_s` is from its class's promise; None when
    the class has no target."""
    target = config.targets_s.get(priority)
    if not target:
        return None
    bound = config.starvation_s.get(priority)
    return {"class": priority, "target_s": target, "starving_after_s": bound, "waited_s": round(waited_s, 1),
            "share": round(waited_s / target, 3), "left_s": round(target - waited_s, 1)}


def describe(p: dict) -> str:
    """'waited 3.2h of the low class's 12d target (2%); past 6d it goes ahead of every class'."""
    head = f"waited {short_span(p['waited_s'])} of the {p['class']} class's {short_span(p['target_s'])} target " \
           f"({100 * p['share']:.0f}%)"
    bound = p["starving_after_s"]
    if p["left_s"] < 0:
        return head + f"; over it by {short_span(-p['left_s'])}: it is served before every job not starving"
    if bound is not None and p["waited_s"] > bound:
        return head + f"; starving since {short_span(p['waited_s'] - bound)} ago: it goes ahead of every class"
    if bound is not None:
        return head + f"; past {short_span(bound)} it goes ahead of every class"
    return head


def short_span(seconds: float) -> str:
    """90 -> '1.5m', 5400 -> '1.5h': a duration in a few characters."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.0f}s"

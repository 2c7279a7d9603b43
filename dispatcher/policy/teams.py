"""Team quotas within one cycle: guarantees (GPUs a team gets back first whenever it has work
waiting) and limits (the most it may hold), in GPUs, kept current as the cycle places jobs; a job
array's own cap (--array 0-99%8: at most 8 elements at once); and the classes' lanes (the policy's
`reserve`: GPUs kept free for interactive work, which lower classes may not take: HELD_FOR_CLASS).

A job is refused (OVER_LIMIT) past its team's limit, and held back (HELD_FOR_TEAM) when taking GPUs
beyond its team's guarantee would leave too few free for the teams still below theirs. A team
below its guarantee may preempt the jobs of teams above theirs (reclaims). Pure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..core.gpuspec import gpu_fits
from ..core.model import JobSpec, priority_rank
from ..core.plan import Code
from .config import PolicyConfig


@dataclass
class Teams:
    """Team usage against guarantees and limits, in GPUs, kept current through the cycle."""

    config: PolicyConfig
    used: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    demand: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    arrays: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # array id -> elements running
    by_class: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # class rank -> GPUs held
    #: pending jobs that victims stop for (this cycle's preemptions, and those still stopping from earlier
    #: ones): job id -> (team, GPUs); a team's GPUs on their way, which its guarantee counts as held
    coming: dict[str, tuple[str, int]] = field(default_factory=dict)
    coming_to: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # team -> GPUs coming
    #: team -> the (GPU types, GPU memory) its waiting jobs ask for; and one GpuInfo of each (name, memory) of
    #: GPU the cycle's nodes have: a guarantee holds GPUs back only from jobs that could take a kind its team
    #: could use
    wants: dict[str, set] = field(default_factory=lambda: defaultdict(set))
    gpu_kinds: tuple = ()
    _overlap: dict = field(default_factory=dict)

    def running(self, spec: JobSpec, gpus: int) -> None:
        """Count a job already running (holding `gpus` GPUs)."""
        self.used[spec.team] += gpus
        self.by_class[spec.rank] += gpus
        if spec.array_of:
            self.arrays[spec.array_of] += 1

    def kept_from(self, spec: JobSpec) -> tuple[int, str]:
        """GPUs `spec` must leave free for the lanes of the classes above it (the policy's reserve, less
        what jobs of that class or above hold), and the class whose lane it is."""
        keep, lane = 0, ""
        for cls, n in self.config.reserve.items():
            rank = priority_rank(cls)
            if rank > spec.rank:
                left = n - sum(g for r, g in self.by_class.items() if r >= rank)
                if left > keep:
                    keep, lane = left, cls
        return keep, lane

    def guarantee(self, team: str) -> int:
        q = self.config.teams.get(team)
        return q.guarantee_gpus if q else 0

    def owed(self, team: str) -> int:
        """GPUs `team` still needs to reach its guarantee (what victims stop for counts as held), bounded by
        what it has waiting."""
        return max(0, min(self.guarantee(team) - self.used[team] - self.coming_to[team], self.demand[team]))

    def on_the_way(self, spec: JobSpec) -> None:
        """Victims stop for `spec` (pending): its GPUs are its team's from now on, as its guarantee counts."""
        if spec.id not in self.coming:
            self.coming[spec.id] = (spec.team, spec.gpus)
            self.coming_to[spec.team] += spec.gpus

    def limit(self, team: str) -> int | None:
        """The most GPUs the team may hold at once (its limit_gpus), or None."""
        q = self.config.teams.get(team)
        return None if q is None else q.limit_gpus

    def check(self, spec: JobSpec, free_gpus: int) -> tuple[Code, str] | None:
        """Why a team rule (or its array's cap) keeps `spec` from starting now (with `free_gpus` free in the
        cluster), or None."""
        if spec.array_limit and self.arrays[spec.array_of] >= spec.array_limit:
            return Code.OVER_LIMIT, (f"array {spec.array_of} runs {self.arrays[spec.array_of]} of its elements, its "
                                     f"cap (%{spec.array_limit})")
        if self.config.reserve and spec.gpus:
            keep, lane = self.kept_from(spec)
            if keep and free_gpus - spec.gpus < keep:
                return Code.HELD_FOR_CLASS, (f"{free_gpus} GPUs free; {keep} of them are kept for {lane} work "
                                             f"(the policy's reserve.{lane} = {self.config.reserve[lane]})")
        if not self.config.teams:
            return None
        team, g = spec.team, spec.gpus
        q = self.config.teams.get(team)
        if q and q.limit_gpus is not None and g > q.limit_gpus:
            return Code.OVER_LIMIT, (f"needs {g} GPUs, more than team {team}'s limit of {q.limit_gpus}: it cannot "
                                     "start until the policy raises the limit")
        if q and q.limit_gpus is not None and self.used[team] + g > q.limit_gpus:
            return Code.OVER_LIMIT, (f"team {team} holds {self.used[team]} of its limit of {q.limit_gpus} GPUs; "
                                     f"this job needs {g} more")
        if g and self.used[team] + g > self.guarantee(team):
            owed = {t: self.owed(t) for t in self.config.teams if t != team and self.owed(t) and self.competes(spec, t)}
            if owed and free_gpus - g < sum(owed.values()):
                who = ", ".join(f"{t} needs {n}" for t, n in sorted(owed.items()))
                return Code.HELD_FOR_TEAM, (f"team {team or '(none)'} would go past its guarantee of "
                                            f"{self.guarantee(team)} GPUs; the {free_gpus} free GPUs are held for "
                                            f"teams below their guarantee ({who})")
        return None

    def competes(self, spec: JobSpec, team: str) -> bool:
        """Could `spec` take a kind of GPU that some waiting job of `team` could use (any, if the cycle's
        nodes are not known)?"""
        key = (spec.gpu_types, spec.gpu_mem_gb, team)
        got = self._overlap.get(key)
        if got is None:
            got = self._overlap[key] = not self.wants.get(team) or not self.gpu_kinds or any(
                gpu_fits(spec.gpu_types, spec.gpu_mem_gb, g) and self._could_use(team, g) for g in self.gpu_kinds)
        return got

    def _could_use(self, team: str, gpu) -> bool:
        """Could a waiting job of `team` run on `gpu` (a GpuInfo)? Yes if its requests are not known."""
        wants = self.wants.get(team)
        return not wants or any(gpu_fits(types, mem_gb, gpu) for types, mem_gb in wants)

    def takes_owed(self, spec: JobSpec, node, gpus) -> bool:
        """Would `spec` on these `gpus` of `node` (a NodeView) take one that a team below its guarantee, with
        work waiting, could use? A job held for such teams that would take none of theirs starts."""
        owed = [t for t in self.config.teams if t != spec.team and self.owed(t)]
        return any(self._could_use(t, node.gpu(g)) for t in owed for g in gpus)

    def waiting(self, spec: JobSpec) -> None:
        """`spec` waits: its GPUs count in its team's demand, its request among its team's wants."""
        self.demand[spec.team] += spec.gpus
        if spec.team in self.config.teams and (spec.gpu_types, spec.gpu_mem_gb) not in self.wants[spec.team]:
            self.wants[spec.team].add((spec.gpu_types, spec.gpu_mem_gb))
            self._overlap.clear()

    def take(self, spec: JobSpec) -> None:
        team, gpus = self.coming.pop(spec.id, (None, 0))
        if team is not None:
            self.coming_to[team] -= gpus
        self.used[spec.team] += spec.gpus
        self.by_class[spec.rank] += spec.gpus
        if spec.array_of:
            self.arrays[spec.array_of] += 1
        self.demand[spec.team] = max(0, self.demand[spec.team] - spec.gpus)

    def reclaims(self, team: str, victim_team: str) -> bool:
        """May a job of `team` preempt one of `victim_team` to reclaim its guarantee (it is below its
        guarantee, the victim's team above its own)?"""
        return bool(self.config.teams) and self.used[team] + self.coming_to[team] < self.guarantee(team) \
            and self.used[victim_team] > self.guarantee(victim_team)


def beyond(profiles: dict[str, PolicyConfig], gpus: int) -> list[str]:
    """What a policy's profiles ask that a cluster of `gpus` usable GPUs cannot give: a class lane (reserve)
    as large as the cluster, team guarantees that add up to more than it. Said when it is applied; legal all
    the same (the cluster may grow)."""
    out = []
    for name, config in profiles.items():
        where = f" (profile {name})" if len(profiles) > 1 else ""
        out += [f"reserve.{cls} = {n} keeps all {gpus} GPUs of the cluster for {cls} work and above{where}: "
                f"lower classes start nothing" for cls, n in config.reserve.items() if n >= gpus]
        total = sum(q.guarantee_gpus for q in config.teams.values())
        if total > gpus:
            out.append(f"the team guarantees add up to {total} GPUs on a cluster of {gpus}{where}: the teams "
                       f"cannot all hold theirs at once")
    return list(dict.fromkeys(out))

"""What one scheduling cycle sees (a Snapshot of nodes, running and pending jobs) and what it
decides (a Plan of placements, verdicts, reservations and preemptions): plain, frozen data shared by
the policy, the store, the scheduler and the simulator. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from .model import GpuInfo, JobSpec


@dataclass(frozen=True)
class NodeView:
    """A live node: its GPUs and what is still free on it.

    `free_gpus` are the indices not held by any job; `free_cpus`/`free_mem_gb`
    are the node's totals less what running jobs asked for.
    """

    name: str
    gpus: tuple[GpuInfo, ...]
    cpus: int
    mem_gb: float
    free_gpus: tuple[int, ...]
    free_cpus: int
    free_mem_gb: float
    #: GPUs held only by sharing jobs: (index, GB their declared memory adds up to).
    shared: tuple[tuple[int, float], ...] = ()
    #: Drained (`dispatch drain`): why ("" if no reason was given); None: it takes jobs. A drained node
    #: takes no new job (no placement, reservation, preemption or gang rank); its jobs run on.
    drained: str | None = None

    def gpu(self, index: int) -> GpuInfo:
        if 0 <= index < len(self.gpus) and self.gpus[index].index == index:  # the usual layout
            return self.gpus[index]
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(index)


def taking_jobs(nodes) -> tuple[NodeView, ...]:
    """The nodes that take new jobs: all but the drained ones."""
    return tuple(v for v in nodes if v.drained is None)


@dataclass(frozen=True)
class RunningJob:
    """A job holding resources (assigned or running, or being preempted: `stopping`)."""

    spec: JobSpec
    node: str
    gpus: tuple[int, ...]
    started_ms: int
    checkpoint_ms: int = 0  # when it last reported a checkpoint (0: never)
    preempted_ms: int = 0  # when it was last preempted (0: never), for the cooldown
    stopping: bool = False  # a preemption or cancel is under way; its GPUs come back soon
    attained_gpu_s: float = 0.0  # GPU-seconds received in earlier attempts
    #: A gang: the rank this piece is (`node`, `gpus` are that rank's), and, on the job's own entry
    #: (rank 0, as the scheduler's mirror keeps it), the other ranks' (node, gpus). See pieces().
    rank: int = 0
    extra: tuple[tuple[str, tuple[int, ...]], ...] = ()
    ended: frozenset = frozenset()  # a gang's ranks whose end is recorded (their GPUs are free again)
    preempted_for: str = ""  # stopping for a preemption: the pending job its GPUs go to ("": none known)

    def attained_at(self, now_ms: int) -> float:
        """GPU-seconds received so far, this run included."""
        return self.attained_gpu_s + max(0, now_ms - self.started_ms) / 1000.0 * len(self.gpus)

    def remaining_s(self, now_ms: int) -> float | None:
        """Its estimate less the time it has run; None without an estimate or past it."""
        if self.spec.est_s is None:
            return None
        left = self.spec.est_s - max(0, now_ms - self.started_ms) / 1000.0
        return left if left > 0 else None


def pieces(running) -> tuple[RunningJob, ...]:
    """What the policy is shown of running jobs: one RunningJob per node a job holds (a gang's ranks each
    on its own node, as the simulator shows them, but those whose end is recorded), from entries whose
    `extra` lists a gang's other ranks (rank 0's piece is the entry: a piece is a gang's if its rank or
    its extra says so, is_gang_piece)."""
    out = []
    for r in running:
        if not r.extra:
            out.append(r)
            continue
        if 0 not in r.ended:
            out.append(r)
        out += [replace(r, node=node, gpus=gpus, rank=i, extra=()) for i, (node, gpus) in enumerate(r.extra, 1)
                if i not in r.ended]
    return tuple(out)


def is_gang_piece(r: RunningJob) -> bool:
    return bool(r.rank or r.extra)


@dataclass(frozen=True)
class PendingJob:
    spec: JobSpec
    attempt: int = 0
    since_ms: int | None = None  # what aging counts from (None: the submit time)
    attained_gpu_s: float = 0.0  # GPU-seconds received in earlier attempts

    @property
    def wait_from_ms(self) -> int:
        return self.spec.submit_ms if self.since_ms is None else self.since_ms


@dataclass(frozen=True)
class Snapshot:
    """Everything the policy may look at for one cycle."""

    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...]
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True)
class Placement:
    job_id: str
    node: str
    gpus: tuple[int, ...]
    score: float
    terms: dict[str, float] = field(default_factory=dict, compare=False)
    rank: int = 0
    reason: str = ""  # why it won, in words
    share: bool = False
    #: A gang (--nodes N, or a job larger than any node on whole nodes): ranks 1..N-1 as (node, GPUs), in
    #: rank order; `node` and `gpus` are rank 0's. One commit holds them all (store: commit_gang.lua).
    extra: tuple[tuple[str, tuple[int, ...]], ...] = ()


class Code(str, Enum):
    """Why a job did not start, k8s-style: now vs ever."""

    NO_FIT_NOW = "no_fit_now"  # would fit if resources were free
    NO_FIT_EVER = "no_fit_ever"  # no live node could ever hold it
    LOWER_SCORE = "lower_score"  # fitted at the start of the cycle; higher-ranked jobs took the room
    RESERVED = "reserved"  # fits, but the GPUs are held for a higher-ranked job
    OVER_LIMIT = "over_limit"  # its team is at its GPU limit
    HELD_FOR_TEAM = "held_for_team"  # its team would borrow GPUs that teams below their guarantee need
    HELD_FOR_CLASS = "held_for_class"  # the GPUs left are a higher class's lane (the policy's reserve)


@dataclass(frozen=True)
class Verdict:
    job_id: str
    code: Code
    reason: str
    score: float = 0.0
    rank: int = 0
    terms: dict[str, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Reservation:
    """GPUs held for a blocked job from `start_ms` on (its estimated start)."""

    job_id: str
    node: str
    gpus: tuple[int, ...]
    start_ms: int


@dataclass(frozen=True)
class Preemption:
    """Stop `job_id` (or shrink it to `keep_gpus`) so that `for_job` can start."""

    job_id: str
    node: str
    mode: str  # "graceful" (checkpoint signal, grace, SIGKILL), "forced" (SIGKILL), "shrink"
    gpus: tuple[int, ...]  # GPUs it gives up
    for_job: str
    reason: str
    keep_gpus: tuple[int, ...] = ()  # shrink: the GPUs it keeps
    lost_gpu_s: float = 0.0  # work lost: GPU-seconds since its last checkpoint (or start)


@dataclass(frozen=True)
class Plan:
    placements: tuple[Placement, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    #: Jobs the cycle did not reach get no Verdict of their own: `rest` counts them. Those of a
    #: group (one user's jobs of one request shape, team and strength; policy.backlog.bucket_key)
    #: whose first job got a verdict share it (`rest_like`: group -> that Verdict); the others
    #: could not start anywhere, and `rest_reason` says why. policy.rest_verdict gives either.
    rest: int = 0
    rest_reason: str = ""
    rest_like: dict = field(default_factory=dict)

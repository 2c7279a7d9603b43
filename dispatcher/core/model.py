"""Plain, frozen data of jobs and GPUs: what users submit and nodes report, shared by every part
(what a scheduling cycle sees and decides is in cycle.py).

No I/O here. Times are integers in milliseconds since the epoch (`*_ms`),
durations in seconds (`*_s`), memory in GB (decimal, as GPU vendors count).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields as dataclass_fields

#: Priority classes, lowest first. The index is the class rank.
PRIORITIES = ("low", "normal", "high", "critical")
#: Other names users type for a class (the seed document says MEDIUM).
PRIORITY_ALIASES = {"medium": "normal", "batch": "low", "interactive": "high"}

#: Job states. `assigned` = placed by the scheduler, not yet started by its node.
PENDING, ASSIGNED, RUNNING, PREEMPTING = "pending", "assigned", "running", "preempting"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
ACTIVE_STATES = (ASSIGNED, RUNNING, PREEMPTING)
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED)

#: Version of the job spec record; bump on an incompatible change.
SPEC_VERSION = 1
#: A spec packed larger than this is refused at submit (store.codec.encode_spec) and before decoding.
MAX_SPEC_BYTES = 256 * 1024
#: A held GPU below this utilization (percent, as NVML reports it) counts as idle unless the policy sets
#: another idle_util (policy/config.py's default; the samples the scheduler records use the policy's).
IDLE_UTIL_PCT = 5.0


_RANKS = {p: i for i, p in enumerate(PRIORITIES)}


def priority_rank(priority: str) -> int:
    """The class's rank (low 0 .. critical 3); ValueError for an unknown class."""
    try:
        return _RANKS[priority]
    except KeyError:
        raise ValueError(f"{priority!r} is not a priority class") from None


@dataclass(frozen=True)
class JobSpec:
    """What the user asked for. Immutable once submitted."""

    id: str
    command: tuple[str, ...]
    name: str = ""
    user: str = "nobody"
    team: str = ""
    cwd: str = ""
    env: tuple[tuple[str, str], ...] = ()
    gpus: int = 0
    gpu_types: tuple[str, ...] = ()  # acceptable GPU families; empty = any
    gpu_mem_gb: float = 0.0  # minimum memory of each GPU
    cpus: int = 1
    mem_gb: float = 0.0
    priority: str = "normal"
    est_s: float | None = None  # the user's estimate of the run time
    checkpointable: bool = False
    grace_s: float = 30.0
    submit_ms: int = 0
    share: bool = False  # may share GPUs with other sharing jobs, within gpu_mem_gb each
    min_gpus: int | None = None  # elastic: may be shrunk to this many GPUs (None: not elastic)
    preemptible: bool = False  # opts in to forced preemption by any higher class
    checkpoint_signal: str = "TERM"  # sent to the process group to ask for a checkpoint
    retries: int = 3  # attempts lost with their node that are rerun before the job fails
    fail_retries: int = 0  # attempts that failed (non-zero exit, a signal not dispatch's) run again (--retry-failed)
    after: tuple[str, ...] = ()  # starts once all of these jobs succeeded (fails if one fails or is cancelled)
    after_any: tuple[str, ...] = ()  # starts once all of these jobs ended, however they ended
    scaling: str = ""  # elastic (--gpus MIN-MAX): how the run time scales with GPUs (core/elastic.py)
    #: A gang (--nodes N --gpus-per-node G): exactly `nodes` nodes with `gpus_per_node` GPUs each, `gpus`
    #: = nodes * gpus_per_node in all, `cpus` and `mem_gb` on each node. 0: one node (or, for a job larger
    #: than any node, as many whole nodes as its GPUs fill: the simulator's trace gangs).
    nodes: int = 0
    gpus_per_node: int = 0
    same_type: bool = True  # every node of a gang on one GPU family
    #: A job (every rank of a gang) that reports no progress for this long is restarted as a lost attempt.
    hang_timeout_s: float | None = None
    #: A limit on each attempt's run time (--time, Slurm's): the checkpoint signal at the limit, SIGKILL
    #: grace_s later, and the job fails (not requeued). Each attempt gets the whole limit.
    time_limit_s: float | None = None
    #: --begin (Slurm's): not started before this instant (ms since the epoch; 0: no wait).
    begin_ms: int = 0
    #: An interactive session (`dispatch shell`, workers/tty.py): "shell" (the user's shell, with fallbacks on
    #: the node) or "command" (the command given), run on a PTY whose terminal is carried through Redis; "" a
    #: batch job. idle_timeout_s: with no keystroke and no output for this long the agent ends the session (None: never).
    interactive: str = ""
    idle_timeout_s: float | None = None
    #: An element of a job array (--array, core/arrays.py): the array's id (its first element's), this
    #: element's index (DISPATCH_ARRAY_INDEX), the array's size, and how many of it may run at once (0: any).
    array_of: str = ""
    array_index: int | None = None
    array_count: int = 0
    array_limit: int = 0
    #: --output: a file pattern on the node the output is appended to as it runs (core/outputs.py), "" none;
    #: --notify: a command or an http(s) URL told of the job's end (dispatcher/notify.py), "" none.
    output: str = ""
    notify: str = ""

    @property
    def rank(self) -> int:
        got = _RANKS.get(self.priority)  # (asked per job per node in a cycle: no call on the way)
        return priority_rank(self.priority) if got is None else got

    def filled(self, **values) -> "JobSpec":
        """A copy with these fields set, as dataclasses.replace but without running __init__ again
        (which costs more than the rest of a submit): for values already checked, as submit fills a
        sweep's checked template with each job's id, command, name and time. A value equal to its
        field's default (and of its type) is left to the class attribute that holds the default."""
        fields = self.__dict__.copy()
        for name, value in values.items():
            if _is_default(name, value):
                fields.pop(name, None)
            else:
                fields[name] = value
        spec = object.__new__(JobSpec)
        object.__setattr__(spec, "__dict__", fields)
        return spec

    def job(self, job_id: str, name: str, command: tuple, submit_ms: int, after: tuple = (), after_any: tuple = (),
            array_index: int | None = None) -> "JobSpec":
        """filled() with one job's own fields, on a template that holds none of them but its empty id and
        command: the decoder's, once per job read (a scheduler's cold read makes 100,000), without a call
        per field."""
        fields = self.__dict__.copy()
        fields["id"], fields["command"] = job_id, command
        if name:
            fields["name"] = name
        if submit_ms:
            fields["submit_ms"] = submit_ms
        if after:
            fields["after"] = after
        if after_any:
            fields["after_any"] = after_any
        if array_index is not None:
            fields["array_index"] = array_index
        spec = object.__new__(JobSpec)
        object.__setattr__(spec, "__dict__", fields)
        return spec

    def sparse(self) -> "JobSpec":
        """The same spec holding only the fields that differ from their defaults (the others read the
        class attributes dataclass keeps the defaults in): a scheduler holds a spec per pending job, and
        a full instance dict of its 44 fields costs ~1.6 KB, most of it defaults."""
        spec = object.__new__(JobSpec)
        object.__setattr__(spec, "__dict__", {k: v for k, v in self.__dict__.items() if not _is_default(k, v)})
        return spec


#: Each JobSpec field's default (what the class attribute holds), for JobSpec.sparse and filled.
_DEFAULTS = {f.name: f.default for f in dataclass_fields(JobSpec) if f.default is not MISSING}
_NONE = object()


def _is_default(name: str, value) -> bool:
    default = _DEFAULTS.get(name, _NONE)
    return default is not _NONE and type(value) is type(default) and value == default


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as its node agent last saw it."""

    index: int
    name: str
    mem_total_gb: float
    uuid: str = ""
    mem_used_gb: float = 0.0
    util_pct: float = 0.0
    blocked: str = ""  # why it is not handed out (a zombie process holds it); "" = usable

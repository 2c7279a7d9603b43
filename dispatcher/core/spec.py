"""Validating a user's request into a JobSpec, at the edge.

Every bad value (or bad combination: a gang's --nodes, --gpus-per-node and --gpus) raises
InvalidRequestError naming the flag and what is allowed. Pure: the caller passes the user name and
the submit time.
"""

from __future__ import annotations

import functools
import math
import re

from .command import checked_command
from .errors import InvalidRequestError
from .fields import env_pairs, parse_job_ids, refuse_empty, utf8, with_caller
from .gpuspec import MAX_GPU_MEM_GB
from .memo import remembered
from .model import PRIORITIES, PRIORITY_ALIASES, JobSpec
from .outputs import parse_notify, parse_output
from .units import exact, parse_duration, parse_estimate, parse_time_limit, unlimited

_NAME = re.compile(r"^[\w.@+-]{1,64}\Z")  # \w: letters and digits of any script (José, 李), and _

#: Bounds that keep one record small and sane.
MAX_GPUS = 1024
MAX_CPUS = 4096
#: A gang's bounds: nodes (--nodes) and GPUs on each (--gpus-per-node, at most 64); its total within MAX_GPUS.
MAX_NODES = 1024
#: The longest duration a request may give (--est, --time, --hang-timeout): about 31 years.
MAX_DURATION_S = 1e9


def parse_priority(text: str) -> str:
    p = str(text).strip().lower()
    p = PRIORITY_ALIASES.get(p, p)
    if p not in PRIORITIES:
        allowed = ", ".join(reversed(PRIORITIES))
        raise InvalidRequestError(f"--priority: unknown class {text!r}; use one of {allowed}",
                                  field="--priority")
    return p


@functools.lru_cache(maxsize=4096)
def parse_gpu_types(text: str | None) -> tuple[str, ...]:
    """'A100' or 'A100|H100' or 'a100,h100' -> ('A100', 'H100'); None (not given) or 'any' -> (). Text that
    names no type ('', '|') is refused: `--gpu-type "$T"` with T unset would otherwise take any GPU."""
    if text is None or text.strip().lower() in ("any", "*"):
        return ()
    parts = [t.strip() for t in re.split(r"[|,]", text)]
    types = tuple(t for t in parts if t)
    if types and "" in parts:  # 'A100||': an alternative left empty is a mistake, as '' alone
        raise InvalidRequestError(f"--gpu-type: {text!r} has an empty alternative; give e.g. A100 or A100|H100",
                                  field="--gpu-type")
    if not types:
        raise InvalidRequestError(f"--gpu-type: {text!r} names no GPU type; give e.g. A100 or A100|H100, or leave "
                                  "--gpu-type out (any type)", field="--gpu-type")
    for t in types:
        if not re.fullmatch(r"[A-Za-z0-9 _.-]{1,64}", t):
            raise InvalidRequestError(f"--gpu-type: {t!r} is not a GPU type; use e.g. A100 or A100|H100",
                                      field="--gpu-type")
    return types


#: Signals a job may ask for as its checkpoint signal.
CHECKPOINT_SIGNALS = ("TERM", "INT", "USR1", "USR2", "HUP", "QUIT")


def parse_signal(text: str) -> str:
    name = str(text or "TERM").strip().upper().removeprefix("SIG")
    if name not in CHECKPOINT_SIGNALS:
        raise InvalidRequestError(f"--checkpoint-signal: {text!r} is not one of {', '.join(CHECKPOINT_SIGNALS)}",
                                  field="--checkpoint-signal")
    return name


def _number(value, flag: str, *, lo: float, hi: float, integer: bool):
    """`value` (text of ASCII digits, or a number) as an int or float in [lo, hi]; raises naming `flag`."""
    if isinstance(value, str) and not value.strip():
        raise InvalidRequestError(f"{flag}: empty; give a number, or leave {flag} out", field=flag)
    try:
        if isinstance(value, bool) or (isinstance(value, str) and not value.isascii()):
            raise ValueError  # JSON's true is no count of GPUs (int(True) is 1); '٣' is no digit here
        if integer and isinstance(value, float) and not value.is_integer():
            raise ValueError
        n = int(value) if integer else float(value)
    except (TypeError, ValueError, OverflowError):
        kind = "a whole number" if integer else "a number"
        raise InvalidRequestError(f"{flag}: {value!r} is not {kind}", field=flag) from None
    if not lo <= n <= hi:
        raise InvalidRequestError(f"{flag}: {n} is out of range; allowed {lo:g} to {hi:g}", field=flag)
    return n


_UNITS = {"": 1.0, "g": 1.0, "gb": 1.0, "gib": 1.0, "m": 1 / 1024, "mb": 1 / 1024, "mib": 1 / 1024,
          "t": 1024.0, "tb": 1024.0, "tib": 1024.0}


def _gigabytes(value, flag: str, *, hi: float) -> float:
    """A size in GB: a number (GB), or with a unit as Slurm's users write it: 40G, 40GB, 512M, 1T
    (binary multiples, as Slurm's)."""
    if isinstance(value, str):
        text = value.strip()
        number = text.rstrip("GgMmTtBbIi")
        unit = text[len(number):].lower()
        if unit:
            if unit not in _UNITS or not number.strip():
                raise InvalidRequestError(f"{flag}: {value!r} is not a size; give GB (40), or 40G, 512M, 1T",
                                          field=flag)
            gb = round(_number(number.strip(), flag, lo=-math.inf, hi=math.inf, integer=False) * _UNITS[unit], 6)
            if not 0 <= gb <= hi:
                raise InvalidRequestError(f"{flag}: {value.strip()} is out of range; allowed 0 to {hi:g} GB", field=flag)
            return gb
    return _number(value, flag, lo=0, hi=hi, integer=False)


def _label(value: str, flag: str) -> str:
    if value and not _NAME.match(value):
        shown = repr(value) if len(value) <= 80 else f"{value[:60]!r}... ({len(value)} characters)"
        raise InvalidRequestError(f"{flag}: {shown} may hold only letters, digits and _.@+- (at most 64)", field=flag)
    return value


def _gpu_range(gpus) -> tuple[object, int | None]:
    """--gpus N, or MIN-MAX for an elastic job: (the most GPUs, the least or None)."""
    if isinstance(gpus, str) and "-" in gpus.strip().lstrip("-"):
        low, _, high = gpus.strip().partition("-")
        low = _number(low, "--gpus", lo=1, hi=MAX_GPUS, integer=True)
        high = _number(high, "--gpus", lo=1, hi=MAX_GPUS, integer=True)
        if low >= high:
            raise InvalidRequestError(f"--gpus: {gpus!r}: the range must go from fewer to more GPUs, e.g. 1-8",
                                      field="--gpus")
        return high, low
    return gpus, None


def _scaling_text(scaling, elastic: bool) -> str:
    if scaling in (None, ""):
        return "linear" if elastic else ""
    if not elastic:
        raise InvalidRequestError("--scaling describes an elastic job: give --gpus as a range, e.g. --gpus 1-8",
                                  field="--scaling")
    from .elastic import ScalingError, parse_scaling  # (the policy package: only for a scaling model)

    try:
        parse_scaling(str(scaling))
    except ScalingError as e:
        raise InvalidRequestError(f"--scaling: {e}", field="--scaling") from None
    return str(scaling).strip()


def _gpu_type_text(gpu_type) -> str | None:
    """--gpu-type as text: 'A100|H100', or a list of families from the Python API."""
    if gpu_type is None or isinstance(gpu_type, str):
        return gpu_type
    if isinstance(gpu_type, (list, tuple)) and all(isinstance(t, str) and "|" not in t for t in gpu_type):
        return "|".join(gpu_type)
    raise InvalidRequestError(f"--gpu-type: {gpu_type!r} is not a GPU family or a list of them", field="--gpu-type")


@remembered(4096)
def _checked_template(items: tuple) -> JobSpec:
    return _template(dict(items))


def _template(options: dict) -> JobSpec:
    """The checked options as a spec with no id, command, name or time."""
    return JobSpec(id="", command=(), **check_options(**options))


def check_options(
    *,
    user: str,
    team: str = "",
    cwd: str = "",
    env=(),
    gpus=0,
    gpu_type: str | None = None,
    gpu_mem_gb=0.0,
    cpus=1,
    mem_gb=0.0,
    priority: str = "normal",
    est: str | float | None = None,
    checkpointable: bool = False,
    grace=30.0,
    share: bool = False,
    min_gpus=None,
    preemptible: bool = False,
    checkpoint_signal: str = "TERM", retries=3, retry_failed=0,
    after=(), after_any=(),
    scaling=None,
    nodes=None, gpus_per_node=None, same_type: bool = True, hang_timeout=None,  # a gang; any job's hang timeout
    time=None,  # a hard limit on each attempt's run time (Slurm's --time)
    begin=0,  # not before this instant, ms (dispatcher/begin.py resolves --begin's text at submit)
    output="", notify="",  # its output file on the node, and who is told of its end (core/outputs.py)
) -> dict:
    """Every field of a request but its command and name, checked: the JobSpec fields they give."""
    est_s = _duration(est, "--est", lo=0.001, parse=parse_estimate)
    gpus, low = _gpu_range(gpus)
    if low is not None:
        if min_gpus is not None:
            raise InvalidRequestError("give either --gpus MIN-MAX or --min-gpus, not both", field="--min-gpus")
        min_gpus = low
    f = dict(
        user=_label(str(user or ""), "--user") or "nobody",
        team=_label(str(team or ""), "--team"),
        cwd=utf8(str(cwd or ""), "--cwd"),
        env=env_pairs(env),
        gpus=_number(gpus, "--gpus", lo=0, hi=MAX_GPUS, integer=True),
        gpu_types=parse_gpu_types(_gpu_type_text(gpu_type)),
        gpu_mem_gb=_gigabytes(gpu_mem_gb, "--gpu-mem", hi=MAX_GPU_MEM_GB),
        cpus=_number(cpus, "--cpus", lo=1, hi=MAX_CPUS, integer=True),
        mem_gb=_gigabytes(mem_gb, "--mem", hi=1e7),
        priority=parse_priority(priority),
        est_s=est_s,
        checkpointable=bool(checkpointable),
        grace_s=_duration(grace, "--grace", lo=0, hi=86400, parse=functools.partial(parse_duration, zero=True)),
        share=bool(share),
        min_gpus=None if min_gpus is None else _number(min_gpus, "--min-gpus", lo=1, hi=MAX_GPUS, integer=True),
        preemptible=bool(preemptible),
        checkpoint_signal=parse_signal(checkpoint_signal),
        retries=_number(retries, "--retries", lo=0, hi=100, integer=True),
        fail_retries=_number(retry_failed, "--retry-failed", lo=0, hi=100, integer=True),
        after=parse_job_ids(after, "--after"),
        after_any=parse_job_ids(after_any, "--after-any"),
        scaling=_scaling_text(scaling, low is not None),
        same_type=bool(same_type),
        hang_timeout_s=_duration(hang_timeout, "--hang-timeout", lo=1),
        time_limit_s=None if unlimited(time) else _duration(time, "--time", lo=1, parse=parse_time_limit),  # Slurm's
        output=parse_output(output), notify=parse_notify(notify),
        begin_ms=_number(begin, "--begin", lo=0, hi=1 << 53, integer=True),
    )
    _gang(f, nodes, gpus_per_node, elastic=low is not None)
    _check_together(f, elastic=low is not None)
    return f


def _gang(f: dict, nodes, per_node, *, elastic: bool) -> None:
    """--nodes N with --gpus-per-node G (or --gpus, the total, N x G): f's nodes, gpus_per_node and
    gpus. No --nodes: one node (0; a job larger than any node is an auto gang of whole nodes)."""
    n = 0 if nodes is None else _number(nodes, "--nodes", lo=1, hi=MAX_NODES, integer=True)
    g = None if per_node is None else _number(per_node, "--gpus-per-node", lo=1, hi=64, integer=True)
    f["nodes"], f["gpus_per_node"] = n, 0
    if not n:
        if g is not None:
            raise InvalidRequestError("--gpus-per-node needs --nodes N (how many nodes), e.g. --nodes 2 "
                                      "--gpus-per-node 8", field="--gpus-per-node")
        return
    total = f["gpus"]
    if n >= 2:
        for flag, bad, what in (("--gpus", elastic, "be elastic: give --gpus as one number, not MIN-MAX"),
                                ("--min-gpus", f["min_gpus"] is not None, "be shrunk (--min-gpus)"),
                                ("--share", f["share"], "share its GPUs (--share)")):
            if bad:
                raise InvalidRequestError(f"{flag}: a gang (--nodes {n}) cannot {what}", field=flag)
    if g is None:  # --gpus T over --nodes N
        if total % n:
            raise InvalidRequestError(f"--gpus: {total} GPUs do not divide evenly over --nodes {n}; give a "
                                      f"multiple of {n}, or --gpus-per-node", field="--gpus")
        g = total // n
        if g > 64:
            raise InvalidRequestError(f"--gpus: {total} over --nodes {n} is {g} GPUs per node; at most 64",
                                      field="--gpus")
    elif total and total != n * g:
        raise InvalidRequestError(f"--gpus: {total} is not --nodes {n} x --gpus-per-node {g} = {n * g}; "
                                  f"give one or the other", field="--gpus")
    if n >= 2 and not g:
        raise InvalidRequestError(f"--nodes: a gang of {n} nodes needs GPUs; give --gpus-per-node G (or --gpus, "
                                  f"the total)", field="--nodes")
    if n * g > MAX_GPUS:
        raise InvalidRequestError(f"--nodes: {n} x {g} GPUs is {n * g}; at most {MAX_GPUS} in all", field="--nodes")
    f["nodes"], f["gpus_per_node"], f["gpus"] = n, g, n * g


def _duration(value, flag: str, *, lo: float, hi: float = MAX_DURATION_S, parse=parse_duration) -> float | None:
    """An optional duration (--est, --hang-timeout, --time, --grace) as seconds in [lo, hi]: a number, or
    text `parse` reads (2h30m; --time's Slurm forms too); None when not given. Empty text is refused, not
    taken as none; a bound is told as a duration, in the user's terms (not the seconds it was read as)."""
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():
        raise InvalidRequestError(f"{flag}: empty; give a duration such as 90s, 15m or 2h, or leave {flag} out",
                                  field=flag)
    try:  # (JSON's true, or a list, is read as text: no duration)
        s = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else parse(value, flag=flag)
    except OverflowError:  # a JSON integer of 400 digits
        s = float("inf")
    if not lo <= s <= hi:  # (NaN too)
        shortest = exact(lo) if lo >= 1 or lo == 0 else "more than 0s"
        longest = f"{int(hi // 86400)}d (about {int(hi // (365.25 * 86400))} years)" if hi >= 365 * 86400 else exact(hi)
        raise InvalidRequestError(f"{flag}: {value!r} is out of range; allowed {shortest} to {longest}", field=flag)
    return s


def idle_timeout_s(value) -> float | None:
    """An interactive session's --idle-timeout, in --time's forms and bounds (a bare number is minutes, as
    Slurm's); None (never) for 0."""
    try:
        if float(value) == 0:
            return None
    except (TypeError, ValueError):
        pass
    return _duration(value, "--idle-timeout", lo=1, parse=parse_time_limit)


def _check_together(f: dict, *, elastic: bool) -> None:
    """The checks of fields against each other (and an elastic job's estimate from its scaling table)."""
    if f["scaling"] and f["est_s"] is None:  # a table's time on the most GPUs is the estimate
        from .elastic import run_time

        f["est_s"] = run_time(JobSpec(id="", command=(), **f), f["gpus"])
    if f["min_gpus"] is not None and f["min_gpus"] > f["gpus"]:
        raise InvalidRequestError(f"--min-gpus: {f['min_gpus']} is more than --gpus {f['gpus']}", field="--min-gpus")
    if f["min_gpus"] is not None and not f["checkpointable"] and not elastic:
        raise InvalidRequestError("--min-gpus: an elastic job is shrunk by checkpoint and restart; "
                                  "add --checkpointable", field="--min-gpus")
    if not f["gpus"] and (f["gpu_types"] or f["gpu_mem_gb"]):  # else it would "succeed" on no GPU at all
        flag = "--gpu-type" if f["gpu_types"] else "--gpu-mem"
        raise InvalidRequestError(f"{flag} needs --gpus N (the job asks for no GPU)", field=flag)
    if f["share"] and not (f["gpus"] >= 1 and f["gpu_mem_gb"] > 0):
        raise InvalidRequestError("--share needs --gpus 1 or more and --gpu-mem GB (the memory it may use "
                                  "on each GPU)", field="--share")


def build_spec(*, command, user: str, submit_ms: int, job_id: str = "", name="", **options) -> JobSpec:
    """Check every field of a request and return the spec; raises InvalidRequestError. `options` are
    check_options' keywords (submit's flags). A sweep's jobs differ in their command and name and
    share their other options, so those are checked once per distinct set (when all their values hash)
    into a template that each job's spec copies."""
    options["user"] = user
    template = _checked_template(tuple(sorted(options.items())))
    return _filled(template, command, name, submit_ms, job_id)


def _filled(template: JobSpec, command, name, submit_ms: int, job_id: str = "") -> JobSpec:
    """The template filled with one job's command, name, time and id, all checked."""
    command = checked_command(command)
    spec = template.filled(id=job_id, command=command, name=_label(str(name or ""), "--name"),
                           submit_ms=int(submit_ms))
    return spec  # (its packed size, at most MAX_SPEC_BYTES, is checked as it is encoded: store.codec.encode_spec)


#: The fields of a request as the Python API and `submit --from FILE.jsonl` name them (submit's flags).
REQUEST_FIELDS = {"command": "command", "name": "name", "user": "user", "team": "team", "cwd": "cwd", "env": "env",
                  "gpus": "gpus", "gpu_type": "gpu_type", "gpu_mem": "gpu_mem_gb", "cpus": "cpus", "mem": "mem_gb",
                  "priority": "priority", "est": "est", "checkpointable": "checkpointable", "grace": "grace",
                  "share": "share", "min_gpus": "min_gpus", "preemptible": "preemptible",
                  "checkpoint_signal": "checkpoint_signal", "retries": "retries", "retry_failed": "retry_failed",
                  "after": "after", "after_any": "after_any", "scaling": "scaling", "nodes": "nodes", "gpus_per_node": "gpus_per_node",
                  "same_type": "same_type", "hang_timeout": "hang_timeout", "time": "time", "output": "output",
                  "notify": "notify", "begin": "begin"}


def spec_from_request(request: dict, *, user: str, submit_ms: int, cwd: str) -> JobSpec:
    """A request dict (REQUEST_FIELDS; `user` and `cwd` default to the caller's, and a relative cwd is taken
    from the caller's: core/fields.with_caller) -> a checked spec.
    Requests with the same fields but their command and name share one checked template, found by
    those fields as the request gives them (a sweep's lines)."""
    if not isinstance(request, dict):
        raise InvalidRequestError("a request must be an object of submit's fields, with 'command'", field="request")
    refuse_empty(request)
    shared = [kv for kv in request.items() if kv[0] != "command" and kv[0] != "name"]
    template = _request_template((user, cwd, *shared))
    return _filled(template, request.get("command"), request.get("name"), submit_ms)


@remembered(4096)
def _request_template(key: tuple) -> JobSpec:
    user, cwd, *shared = key
    return _template(_options(shared, user, cwd))


def _options(shared: list, user: str, cwd: str) -> dict:
    """A request's fields (but command and name) as check_options' keywords."""
    try:
        options = {REQUEST_FIELDS[k]: v for k, v in shared}
    except (KeyError, TypeError):
        unknown = sorted(str(k) for k, _ in shared if not isinstance(k, str) or k not in REQUEST_FIELDS)
        raise InvalidRequestError(f"unknown field {unknown[0]!r}; known: {', '.join((*REQUEST_FIELDS, 'array'))}",
                                  field=unknown[0]) from None
    return with_caller(options, user, cwd)

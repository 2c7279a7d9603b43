"""msgpack encoding of records. Every record carries its schema version under "v".

No pickle anywhere. Decoding checks types and sizes and raises MalformedRecord,
so a hostile or corrupt record never reaches the policy.
"""

from __future__ import annotations

import math
import operator

import msgpack

from ..core.arrays import MAX_WAITED
from ..core.errors import InvalidRequestError, MalformedRecord
from ..core.memo import remembered
from ..core.model import MAX_SPEC_BYTES, PRIORITIES, SPEC_VERSION, GpuInfo, JobSpec
from ..core.outputs import parse_notify, parse_output



#: The spec's fields as the record names them (JobSpec attribute, key). A job's own fields, then those
#: a sweep's jobs share, whose packed form encode_spec keeps and reuses.
_OWN = (("id", "id"), ("name", "name"), ("command", "cmd"), ("submit_ms", "submit_ms"))
_SHARED = (("user", "user"), ("team", "team"), ("cwd", "cwd"), ("env", "env"), ("gpus", "gpus"),
           ("gpu_types", "gpu_types"), ("gpu_mem_gb", "gpu_mem_gb"), ("cpus", "cpus"), ("mem_gb", "mem_gb"),
           ("priority", "prio"), ("est_s", "est_s"), ("checkpointable", "ckpt"), ("grace_s", "grace_s"),
           ("share", "share"), ("min_gpus", "min_gpus"), ("preemptible", "preemptible"),
           ("checkpoint_signal", "ckpt_sig"), ("retries", "retries"), ("fail_retries", "fretries"), ("after", "after"),
           ("after_any", "after_any"), ("scaling", "scaling"), ("nodes", "nodes"), ("gpus_per_node", "gpn"),
           ("same_type", "same_type"), ("hang_timeout_s", "hang_s"), ("time_limit_s", "time_s"),
           ("interactive", "tty"), ("idle_timeout_s", "tty_idle_s"), ("array_of", "array"),
           ("array_count", "arr_n"), ("array_limit", "arr_cap"), ("output", "out"), ("notify", "notify"),
           ("begin_ms", "begin"))
_shared_values = operator.attrgetter(*(attr for attr, _ in _SHARED))
#: One map of the version and every field (a map of 16 or more entries has a 3-byte header).
def _header(own: int) -> bytes:
    return b"\xde" + (1 + len(_SHARED) + own).to_bytes(2, "big")


_HEADER = _header(len(_OWN))


def encode_spec(spec: JobSpec, job_id: str | None = None) -> bytes:
    """`job_id`: encode it under this id instead of spec.id (submit assigns ids as it writes).
    Tuples pack as arrays; the map is the version, the shared fields and the job's own. A spec that packs
    larger than MAX_SPEC_BYTES is refused: the scheduler would set it aside unread."""
    shared = _packed_shared(_shared_values(spec))
    own = {"id": spec.id if job_id is None else job_id, "name": spec.name, "cmd": spec.command,
           "submit_ms": spec.submit_ms}
    if spec.array_index is not None:  # an array's element: its index (arrays.py)
        own["arr_i"] = spec.array_index
    packed = msgpack.packb(own)
    if len(shared) + len(packed) + 2 > MAX_SPEC_BYTES:
        raise InvalidRequestError(f"the request is larger than {MAX_SPEC_BYTES // 1024} KiB (command, --env, --cwd)",
                                  field="COMMAND")
    return (_HEADER if len(own) == 4 else _header(len(own))) + shared + packed[1:]  # (own: a fixmap, 1-byte header)


@remembered(4096)  # (a spec built by hand may hold lists)
def _packed_shared(values: tuple) -> bytes:
    """The version and the shared fields as packed key/value pairs, without their map's header."""
    return msgpack.packb({"v": SPEC_VERSION, **{key: v for (_, key), v in zip(_SHARED, values)}})[3:]


class _Bad(Exception):
    """Internal: what is wrong with a record, before decode_spec names the record."""


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise _Bad(what)


#: Numbers of a spec are finite: an infinite estimate or size is a malformed record.
INF = math.inf
#: Absent from the record (distinct from a stored nil).
_MISSING = object()
#: Record keys of the fields a sweep's jobs share, checked once per distinct set (_checked_shared);
#: dependencies, though packed with them, are a job's own when read.
_SHARED_KEYS = tuple(k for _, k in _SHARED if k not in ("after", "after_any"))
#: Counts that must be ints, not bools: the cache key carries their types (True == 1 in a key).
_STRICT_INTS = ("gpus", "cpus", "retries", "fretries", "min_gpus", "nodes", "gpn", "arr_n", "arr_cap", "begin")
_shared_of, _strict_of = operator.itemgetter(*_SHARED_KEYS), operator.itemgetter(*_STRICT_INTS)
_own_of = operator.itemgetter("cmd", "id", "name", "submit_ms")


def decode_spec(raw: bytes, *, key: str = "spec") -> JobSpec:
    """The spec a record holds, checked; MalformedRecord if it holds none."""
    quick = _known_shared(raw)
    if quick is not None:
        return quick
    return _decode_whole(raw, key)


#: The shared part of a record as encode_spec packs it (the bytes between the map's header and the job's
#: own fields) -> (the template it was checked into, its dependencies, how many pairs it packs). Filled by
#: _decode_whole; a queue holds a few thousand distinct requests.
_SHARED_SEEN: dict[bytes, tuple[JobSpec, tuple, tuple, int]] = {}
_SEEN_MAX = 4096
_OWN_KEY = b"\xa2id"  # msgpack of "id", the first of a record's own fields (encode_spec)
_OWN_FIELDS = frozenset(("id", "name", "cmd", "submit_ms", "arr_i"))


def _known_shared(raw) -> JobSpec | None:
    """A record whose shared part was read before, decoded from its own fields alone (a sweep's jobs differ
    in those only): no map of 40 fields built and checked again. msgpack packs every value whole, so a
    prefix equal to a complete shared part already read ends exactly where that part ends; the own fields
    after it are then checked as _decode_whole checks them. None: read the whole record."""
    if type(raw) is not bytes or len(raw) > MAX_SPEC_BYTES or raw[:1] != b"\xde":
        return None
    at = raw.find(_OWN_KEY, 3)
    while at != -1:
        seen = _SHARED_SEEN.get(raw[3:at])
        if seen is not None:
            break
        at = raw.find(_OWN_KEY, at + 1)
    else:
        return None
    template, after, after_any, pairs = seen
    own = int.from_bytes(raw[1:3], "big") - pairs
    if not 4 <= own <= 5:
        return None
    try:
        d = msgpack.unpackb(bytes((0x80 | own,)) + raw[at:], raw=False, strict_map_key=True, use_list=False)
        cmd, job_id, name, submit_ms = _own_of(d)
    except Exception:  # msgpack's several types, a missing field: the whole read says what is wrong
        return None
    index = d.get("arr_i")
    if not (d.keys() <= _OWN_FIELDS and type(cmd) is tuple and cmd and all(type(a) is str for a in cmd) and type(job_id) is str
            and type(name) is str and type(submit_ms) is int and submit_ms >= 0
            and (index is None or type(index) is int and 0 <= index) and len(d) == own):
        return None
    return template.job(job_id, name, cmd, submit_ms, after, after_any, index)


def _decode_whole(raw, key: str) -> JobSpec:
    try:
        _check(isinstance(raw, (bytes, bytearray)) and 0 < len(raw) <= MAX_SPEC_BYTES,
               "missing or larger than the limit")
        try:
            d = msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=False)
        except Exception as e:  # msgpack raises several unrelated types
            raise _Bad(f"not msgpack ({type(e).__name__})") from None
        _check(isinstance(d, dict), "not a map")
        _check(d.get("v") == SPEC_VERSION, f"schema version {d.get('v')!r}, expected {SPEC_VERSION}")
        try:
            shared = (*_shared_of(d), *map(type, _strict_of(d)))
        except KeyError:  # a record written before a field existed, or a broken one
            shared = (*(d.get(k, _MISSING) for k in _SHARED_KEYS), *(type(d.get(k)) for k in _STRICT_INTS))
        template = _checked_shared(shared)  # (a map where none belongs: checked, and refused, uncached)
        try:
            cmd, job_id, name, submit_ms = _own_of(d)
        except KeyError as e:
            raise _Bad(f"missing field {e.args[0]!r}") from None
        _check(type(cmd) is tuple and cmd and all(type(a) is str for a in cmd), "bad cmd")
        _check(type(job_id) is str, "bad id")
        _check(type(name) is str, "bad name")
        _check(type(submit_ms) is int and submit_ms >= 0, "bad submit_ms")
        index = d.get("arr_i")
        _check(index is None or (type(index) is int and 0 <= index), "bad arr_i")
        after, after_any = _ids(d.get("after")), _ids(d.get("after_any"))
        _remember_shared(raw, template, after, after_any, d)
        return template.job(job_id, name, cmd, submit_ms, after, after_any, index)
    except _Bad as e:
        raise MalformedRecord(key, str(e)) from None


def _remember_shared(raw, template: JobSpec, after: tuple, after_any: tuple, d: dict) -> None:
    """Keep the shared part of a record that read whole and well, for _known_shared: the bytes before its
    own fields, where the record ends in them packed as encode_spec packs them (others: not kept)."""
    own = {"id": d["id"], "name": d["name"], "cmd": d["cmd"], "submit_ms": d["submit_ms"]}
    if "arr_i" in d:
        own["arr_i"] = d["arr_i"]
    tail = msgpack.packb(own)[1:]
    if type(raw) is not bytes or raw[:1] != b"\xde" or not raw.endswith(tail):
        return
    if len(_SHARED_SEEN) >= _SEEN_MAX:
        _SHARED_SEEN.clear()
    _SHARED_SEEN[raw[3:len(raw) - len(tail)]] = (template, after, after_any, len(d) - len(own))


def _required(value, field: str):
    if value is _MISSING:
        raise _Bad(f"missing field {field!r}")
    return value


@remembered(4096)  # a queue holds a few thousand distinct requests at most, usually
def _checked_shared(values: tuple) -> JobSpec:
    """The shared fields (as _SHARED_KEYS, then _STRICT_INTS' types), checked, as a spec with no id,
    name, command, time or dependencies. Raises _Bad."""
    d = dict(zip(_SHARED_KEYS, values))
    for field in ("env", "gpu_types", "user", "team", "cwd", "prio", "gpus", "cpus", "gpu_mem_gb", "mem_gb",
                  "grace_s", "est_s", "ckpt"):
        _required(d[field], field)
    env, types, num = d["env"], d["gpu_types"], (int, float)
    _check(type(env) is tuple and all(type(kv) is tuple and len(kv) == 2 and all(type(x) is str for x in kv)
                                      for kv in env), "bad env")
    _check(type(types) is tuple and all(type(t) is str for t in types), "bad gpu_types")
    bad = next((f for f in ("user", "team", "cwd", "prio") if type(d[f]) is not str), None) \
        or next((f for f in ("gpus", "cpus") if not (type(d[f]) is int and 0 <= d[f] < 1 << 31)), None) \
        or next((f for f in ("gpu_mem_gb", "mem_gb", "grace_s") if not (isinstance(d[f], num) and 0 <= d[f] < INF)),
                None)
    if bad is not None:
        raise _Bad(f"bad {bad}")
    _check(d["prio"] in PRIORITIES, f"unknown priority {d['prio']!r}")
    est = d["est_s"]
    _check(est is None or (isinstance(est, num) and 0 < est < INF), "bad est_s")  # (inf: no end to plan for)
    return JobSpec(
        id="", command=(), user=d["user"], team=d["team"], cwd=d["cwd"], env=env, gpus=d["gpus"],
        gpu_types=types, gpu_mem_gb=float(d["gpu_mem_gb"]), cpus=d["cpus"], mem_gb=float(d["mem_gb"]),
        priority=d["prio"], est_s=None if est is None else float(est), checkpointable=bool(d["ckpt"]),
        grace_s=float(d["grace_s"]), share=bool(_given(d["share"], False)), min_gpus=_opt_int(_given(d["min_gpus"])),
        preemptible=bool(_given(d["preemptible"], False)), checkpoint_signal=_signal(_given(d["ckpt_sig"])),
        retries=_retries(_given(d["retries"])), fail_retries=_retries(_given(d["fretries"], 0)),
        scaling=_scaling(_given(d["scaling"])),
        nodes=_count(_given(d["nodes"], 0), "nodes"), gpus_per_node=_count(_given(d["gpn"], 0), "gpn"),
        same_type=bool(_given(d["same_type"], True)), hang_timeout_s=_seconds(_given(d["hang_s"]), "hang_s"),
        time_limit_s=_seconds(_given(d["time_s"]), "time_s"),  # (absent: a record from before --time, no limit)
        interactive=_interactive(_given(d["tty"], "")), idle_timeout_s=_seconds(_given(d["tty_idle_s"]), "tty_idle_s"),
        array_of=_array_of(_given(d["array"], "")), array_count=_count(_given(d["arr_n"], 0), "arr_n"),
        array_limit=_count(_given(d["arr_cap"], 0), "arr_cap"),  # (absent: no array)
        output=_checked(parse_output, _given(d["out"], ""), "out"),  # (absent: from before --output, none)
        notify=_checked(parse_notify, _given(d["notify"], ""), "notify"),
        begin_ms=_count(_given(d["begin"], 0), "begin", 1 << 53),  # (absent: from before --begin, no wait)
    ).sparse()  # every job decoded from it holds only what differs from the defaults


def _given(value, default=None):
    """An optional field's value (absent: the default)."""
    return default if value is _MISSING else value


def _checked(parse, value, field: str) -> str:
    """An optional text field checked as submit checks it (--output, --notify)."""
    _check(type(value) is str, f"bad {field}")
    try:
        return parse(value)
    except InvalidRequestError as e:
        raise _Bad(f"bad {field} ({e})") from None


def _opt_int(value):
    _check(value is None or (type(value) is int and value >= 0), "bad min_gpus")
    return value


def _count(value, field: str, most: int = 4096) -> int:
    _check(type(value) is int and 0 <= value <= most, f"bad {field}")
    return value


def _seconds(value, field: str):
    """An optional positive duration (hang_s, time_s); None when not set."""
    _check(value is None or (isinstance(value, (int, float)) and 0 < value < INF), f"bad {field}")
    return None if value is None else float(value)


def _interactive(value) -> str:
    _check(value in ("", "shell", "command"), f"bad interactive mode {value!r}")
    return value


def _array_of(value) -> str:
    _check(type(value) is str and len(value) <= 64, "bad array")
    return value


def _retries(value) -> int:
    value = 3 if value is None else value
    _check(type(value) is int and 0 <= value <= 100, "bad retries")
    return value


def _ids(value) -> tuple[str, ...]:
    value = () if value is None else value
    _check(type(value) is tuple and len(value) <= MAX_WAITED and all(type(i) is str and i for i in value),
           "bad dependency list")
    return value


def _scaling(value) -> str:
    if value is None or value == "":
        return ""
    from ..core.elastic import ScalingError, parse_scaling

    _check(isinstance(value, str) and len(value) <= 512, "bad scaling")
    try:
        parse_scaling(value)
    except ScalingError as e:
        raise _Bad(f"bad scaling ({e})") from None
    return value


def _signal(value) -> str:
    from ..core.spec import CHECKPOINT_SIGNALS

    value = "TERM" if value is None else value
    if value not in CHECKPOINT_SIGNALS:
        raise _Bad(f"bad checkpoint signal {value!r}")
    return value


def encode_node_info(gpus: list[GpuInfo], cpus: int, mem_gb: float, timeout_s: float = 0.0) -> bytes:
    """`timeout_s`: the agent's DISPATCH_NODE_TIMEOUT_S (its keeper fences its jobs within it), which the
    scheduler waits at least before it takes the node for dead (node_timeout_s)."""
    info = {"v": 1, "cpus": cpus, "mem_gb": mem_gb,
            "gpus": [[g.index, g.name, g.mem_total_gb, g.uuid, g.mem_used_gb, g.util_pct, g.blocked] for g in gpus]}
    if timeout_s:
        info["timeout_s"] = float(timeout_s)
    return msgpack.packb(info)


def node_timeout_s(raw: bytes) -> float:
    """The node timeout its agent wrote in its info record (encode_node_info); 0.0 if none, or unreadable."""
    try:
        t = msgpack.unpackb(raw, raw=False).get("timeout_s", 0.0)
        return float(t) if isinstance(t, (int, float)) and 0 < t < 1e9 else 0.0
    except Exception:
        return 0.0


def decode_node_info(raw: bytes, *, key: str = "node") -> tuple[tuple[GpuInfo, ...], int, float]:
    try:
        d = msgpack.unpackb(raw, raw=False)
        gpus = tuple(GpuInfo(index=int(g[0]), name=str(g[1]), mem_total_gb=float(g[2]), uuid=str(g[3]),
                             mem_used_gb=float(g[4]), util_pct=float(g[5]), blocked=str(g[6]) if len(g) > 6 else "")
                     for g in d["gpus"])
        return gpus, int(d["cpus"]), float(d["mem_gb"])
    except Exception as e:
        raise MalformedRecord(key, f"bad node info ({type(e).__name__})") from None

"""msgpack encoding of records. Every record carries its schema version under "v".

No pickle anywhere. Decoding checks types and sizes and raises MalformedRecord,
so a hostile or corrupt record never reaches the policy.
"""

from __future__ import annotations

import functools
import operator

import msgpack

from ..errors import MalformedRecord
from ..model import PRIORITIES, SPEC_VERSION, GpuInfo, JobSpec
from ..spec import MAX_SPEC_BYTES



#: The spec's fields as the record names them (JobSpec attribute, key). A job's own fields, then those
#: a sweep's jobs share, whose packed form encode_spec keeps and reuses.
_OWN = (("id", "id"), ("name", "name"), ("command", "cmd"), ("submit_ms", "submit_ms"))
_SHARED = (("user", "user"), ("team", "team"), ("cwd", "cwd"), ("env", "env"), ("gpus", "gpus"),
           ("gpu_types", "gpu_types"), ("gpu_mem_gb", "gpu_mem_gb"), ("cpus", "cpus"), ("mem_gb", "mem_gb"),
           ("priority", "prio"), ("est_s", "est_s"), ("checkpointable", "ckpt"), ("grace_s", "grace_s"),
           ("share", "share"), ("min_gpus", "min_gpus"), ("preemptible", "preemptible"),
           ("checkpoint_signal", "ckpt_sig"), ("retries", "retries"), ("after", "after"),
           ("after_any", "after_any"), ("scaling", "scaling"))
_shared_values = operator.attrgetter(*(attr for attr, _ in _SHARED))
#: One map of the version and every field (a map of 16 or more entries has a 3-byte header).
_HEADER = b"\xde" + (1 + len(_SHARED) + len(_OWN)).to_bytes(2, "big")


def encode_spec(spec: JobSpec, job_id: str | None = None) -> bytes:
    """`job_id`: encode it under this id instead of spec.id (submit assigns ids as it writes).
    Tuples pack as arrays; the map is the version, the shared fields and the job's own."""
    values = _shared_values(spec)
    try:
        shared = _packed_shared(values)
    except TypeError:  # a list among the values (a spec built by hand): nothing to remember
        shared = _packed_shared.__wrapped__(values)
    own = msgpack.packb({"id": spec.id if job_id is None else job_id, "name": spec.name, "cmd": spec.command,
                         "submit_ms": spec.submit_ms})
    return _HEADER + shared + own[1:]  # (own: a map of 4, its header one byte)


@functools.lru_cache(maxsize=256)
def _packed_shared(values: tuple) -> bytes:
    """The version and the shared fields as packed key/value pairs, without their map's header."""
    return msgpack.packb({"v": SPEC_VERSION, **{key: v for (_, key), v in zip(_SHARED, values)}})[3:]


_TEXTS = ("id", "name", "user", "team", "cwd", "prio")
_COUNTS = ("gpus", "cpus", "submit_ms")  # ints (not bools), >= 0
_AMOUNTS = ("gpu_mem_gb", "mem_gb", "grace_s")


def _check(cond: bool, key: str, what: str) -> None:
    if not cond:
        raise MalformedRecord(key, what)


def _opt_int(value, key: str):
    _check(value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0), key,
           "bad min_gpus")
    return value


def _retries(value, key: str) -> int:
    value = 3 if value is None else value
    _check(isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100, key, "bad retries")
    return value


def _ids(value, key: str) -> tuple[str, ...]:
    value = [] if value is None else value
    _check(isinstance(value, list) and len(value) <= 64 and all(isinstance(i, str) and i for i in value), key,
           "bad dependency list")
    return tuple(value)


def _scaling(value, key: str) -> str:
    if value is None or value == "":
        return ""
    from ..policy.elastic import ScalingError, parse_scaling

    _check(isinstance(value, str) and len(value) <= 512, key, "bad scaling")
    try:
        parse_scaling(value)
    except ScalingError as e:
        raise MalformedRecord(key, f"bad scaling ({e})") from None
    return value


def _signal(value, key: str) -> str:
    from ..spec import CHECKPOINT_SIGNALS

    value = "TERM" if value is None else value
    if value not in CHECKPOINT_SIGNALS:
        raise MalformedRecord(key, f"bad checkpoint signal {value!r}")
    return value


def decode_spec(raw: bytes, *, key: str = "spec") -> JobSpec:
    _check(isinstance(raw, (bytes, bytearray)) and 0 < len(raw) <= MAX_SPEC_BYTES, key,
           "missing or larger than the limit")
    try:
        d = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise MalformedRecord(key, f"not msgpack ({type(e).__name__})") from None
    _check(isinstance(d, dict), key, "not a map")
    _check(d.get("v") == SPEC_VERSION, key, f"schema version {d.get('v')!r}, expected {SPEC_VERSION}")
    num = (int, float)
    try:
        cmd, env, types = d["cmd"], d["env"], d["gpu_types"]
        _check(isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd), key, "bad cmd")
        _check(isinstance(env, list) and all(isinstance(kv, list) and len(kv) == 2
                                             and all(isinstance(x, str) for x in kv) for kv in env),
               key, "bad env")
        _check(isinstance(types, list) and all(isinstance(t, str) for t in types), key, "bad gpu_types")
        # (the messages are built only for a bad record: this runs once per job the scheduler meets)
        bad = next((f for f in _TEXTS if not isinstance(d[f], str)), None) \
            or next((f for f in _COUNTS if not (type(d[f]) is int and d[f] >= 0)), None) \
            or next((f for f in _AMOUNTS if not (isinstance(d[f], num) and d[f] >= 0)), None)
        if bad is not None:
            raise MalformedRecord(key, f"bad {bad}")
        if d["prio"] not in PRIORITIES:
            raise MalformedRecord(key, f"unknown priority {d['prio']!r}")
        _check(d["est_s"] is None or (isinstance(d["est_s"], num) and d["est_s"] > 0), key, "bad est_s")
        return JobSpec(
            id=d["id"], command=tuple(cmd), name=d["name"], user=d["user"], team=d["team"],
            cwd=d["cwd"], env=tuple((k, v) for k, v in env), gpus=d["gpus"], gpu_types=tuple(types),
            gpu_mem_gb=float(d["gpu_mem_gb"]), cpus=d["cpus"], mem_gb=float(d["mem_gb"]),
            priority=d["prio"], est_s=None if d["est_s"] is None else float(d["est_s"]),
            checkpointable=bool(d["ckpt"]), grace_s=float(d["grace_s"]), submit_ms=d["submit_ms"],
            share=bool(d.get("share", False)), min_gpus=_opt_int(d.get("min_gpus"), key),
            preemptible=bool(d.get("preemptible", False)), checkpoint_signal=_signal(d.get("ckpt_sig"), key),
            retries=_retries(d.get("retries"), key),
            after=_ids(d.get("after"), key), after_any=_ids(d.get("after_any"), key),
            scaling=_scaling(d.get("scaling"), key),
        )
    except KeyError as e:
        raise MalformedRecord(key, f"missing field {e.args[0]!r}") from None


def encode_node_info(gpus: list[GpuInfo], cpus: int, mem_gb: float) -> bytes:
    return msgpack.packb({
        "v": 1, "cpus": cpus, "mem_gb": mem_gb,
        "gpus": [[g.index, g.name, g.mem_total_gb, g.uuid, g.mem_used_gb, g.util_pct, g.blocked] for g in gpus],
    })


def decode_node_info(raw: bytes, *, key: str = "node") -> tuple[tuple[GpuInfo, ...], int, float]:
    try:
        d = msgpack.unpackb(raw, raw=False)
        gpus = tuple(GpuInfo(index=int(g[0]), name=str(g[1]), mem_total_gb=float(g[2]), uuid=str(g[3]),
                             mem_used_gb=float(g[4]), util_pct=float(g[5]), blocked=str(g[6]) if len(g) > 6 else "")
                     for g in d["gpus"])
        return gpus, int(d["cpus"]), float(d["mem_gb"])
    except Exception as e:
        raise MalformedRecord(key, f"bad node info ({type(e).__name__})") from None

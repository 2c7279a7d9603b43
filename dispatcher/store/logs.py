"""A job's output in Redis: one capped stream per job (per rank of a gang), written by its node agent,
read by `dispatch logs` and the job's page."""

from __future__ import annotations

from . import keys
from .connect import text

#: Per-job log stream cap: its latest LOG_BYTES of output (each rank's stream of a gang), each entry counted
#: with LOG_ENTRY_COST bytes more for what Redis spends on it, trimmed oldest first by lua/log_append.lua; an
#: entry holds at most LOG_CHUNK bytes. The whole of it is in the node-side log file and in its --output file
#: (docs/outputs.md).
LOG_BYTES = 64 * 1024 * 1024
LOG_ENTRY_COST = 64
LOG_CHUNK = 64 * 1024


def append_log(client, ns: str, job_id: str, chunk: bytes, *, pipe=None, rank: int = 0) -> None:
    """One entry per LOG_CHUNK bytes of `chunk` (usually one: the agent sends at most that much at a time)."""
    from .scripts import log_append

    pieces = [chunk[at:at + LOG_CHUNK] for at in range(0, max(1, len(chunk)), LOG_CHUNK)]
    log_append(pipe or client, ns, job_id, rank, LOG_BYTES, LOG_ENTRY_COST, pieces)


def log_trimmed(client, ns: str, job_id: str, rank: int = 0) -> bool:
    """Whether the beginning of the job's log stream was trimmed away (more entries were added than it holds)."""
    try:
        info = client.xinfo_stream(keys.job_log(ns, job_id, rank))
    except Exception:  # no stream yet (or one set aside): nothing trimmed that can be told
        return False
    return int(info.get("entries-added") or 0) > int(info.get("length") or 0)


def read_log(client, ns: str, job_id: str, after: str = "-", *, block_ms: int | None = None, rank: int = 0):
    """Log chunks after stream id `after`: list of (id, bytes). With block_ms, waits for new ones. `rank`:
    a gang's rank (each has its own stream)."""
    key = keys.job_log(ns, job_id, rank)
    if block_ms is None:
        start = "-" if after == "-" else f"({after}"
        return [(text(i), f[b"d"]) for i, f in client.xrange(key, min=start)]
    got = client.xread({key: "0-0" if after == "-" else after}, block=block_ms, count=1000)
    return [(text(i), f[b"d"]) for _, entries in got for i, f in entries]


def read_log_tail(client, ns: str, job_id: str, lines: int, *, rank: int = 0) -> tuple[str, bytes]:
    """The log's last `lines` lines (as `tail -n`), read newest chunk first until they are in hand:
    (the newest chunk's id, for read_log to follow from, or "-"; the bytes)."""
    key, got, newlines, before, newest = keys.job_log(ns, job_id, rank), [], 0, "+", "-"
    while True:
        batch = client.xrevrange(key, max=before, count=200 if lines > 0 else 1)
        got += [f.get(b"d", b"") for _, f in batch]
        newlines += sum(chunk.count(b"\n") for chunk in got[len(got) - len(batch):])
        newest = text(batch[0][0]) if batch and newest == "-" else newest
        if lines <= 0 or len(batch) < 200 or newlines > lines:  # the start, or the line before the first wanted
            break
        before = f"({text(batch[-1][0])}"
    data = b"".join(reversed(got))
    body, end = (data[:-1], b"\n") if data.endswith(b"\n") else (data, b"")
    return newest, (b"\n".join(body.split(b"\n")[-lines:]) + end if data and lines > 0 else b"")

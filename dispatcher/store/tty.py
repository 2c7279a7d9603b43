"""An interactive job's terminal, carried through Redis in two streams (keys.job_tty): no socket from the
user's host to the node, only to Redis, as every other client.

`<ns>:job:<id>:tty:in` (`dispatch shell` / `attach` -> the node agent) holds typed entries: "in" (keystrokes,
`d`) and "size" (the terminal's rows and cols). Under identity each entry is signed with its sender's token
(sign_input) over the job, a client nonce, a sequence number and the time; the agent takes an entry only if
it verifies as the job's user (or an admin), is recent, and its number is above the last one of that nonce
(input_ok): a copy of an old entry, or one forged by another user (the user role may XADD to these streams),
is dropped. `<ns>:job:<id>:tty:out` (agent -> client): "start" (the attempt's process is on its PTY, `e` its
epoch), "out" (a batch of terminal output, `d`) and "end" (`code`, `state`, `reason`). Both streams are
capped; the in-stream lives a day from its last entry, and both go 10 minutes after the attempt ends.
"""

from __future__ import annotations

import os
import time

from ..auth.identity import MAX_SKEW_S, sign, verify
from . import keys
from .connect import text

#: Set to "pipe" in a session's environment by a client whose input is no terminal (`dispatch shell <
#: steps.sh`): the node's PTY neither echoes the input nor turns newlines into CR LF (workers/tty.py plain),
#: so what comes back is the output alone, as `ssh host < file` gives it.
PIPED_INPUT = "DISPATCH_TTY_INPUT"
#: Entries kept in each stream (MAXLEN ~): the out-stream's tail is what `attach` shows.
IN_MAXLEN, OUT_MAXLEN = 1000, 2000
#: The in-stream, written by clients alone, expires a day after its last entry (a session never started).
IN_TTL_S = 86400
#: Both streams expire this long after their attempt ends (a client that lost its network reads the end).
ENDED_TTL_S = 600


class Signer:
    """A client's signature of its input entries under identity: its token, a nonce of its own, a sequence."""

    def __init__(self, user: str, token: str, job_id: str):
        self.user, self.token, self.job_id = user, token, job_id
        self.nonce, self.seq = os.urandom(8).hex(), 0

    def fields(self, kind: str, payload: bytes) -> dict:
        self.seq += 1
        ts = f"{time.time():.3f}"
        return {"u": self.user, "c": self.nonce, "n": self.seq, "t": ts,
                "s": sign(self.token, "tty", self.job_id, self.nonce, self.seq, ts, kind, payload)}


def _payload(kind: str, f: dict) -> bytes:
    return f.get(b"d", b"") if kind == "in" else f"{text(f.get(b'rows', b''))}x{text(f.get(b'cols', b''))}".encode()


def send_input(client, ns: str, job_id: str, kind: str, data: bytes = b"", *, rows: int = 0, cols: int = 0,
               signer: Signer | None = None) -> None:
    """One entry on the in-stream: "in" with `data`, "size" with `rows` x `cols`, or "wait" (the client still
    waits for its session to start: client_gone)."""
    f = {"k": kind, "d": data} if kind == "in" else {"k": kind, "rows": int(rows), "cols": int(cols)}
    if signer is not None:
        f.update(signer.fields(kind, data if kind == "in" else f"{int(rows)}x{int(cols)}".encode()))
    key = keys.job_tty(ns, job_id, "in")
    pipe = client.pipeline(transaction=False)
    pipe.xadd(key, f, maxlen=IN_MAXLEN, approximate=True)
    pipe.expire(key, IN_TTL_S)
    pipe.execute()


def input_ok(verifier, owner: str, job_id: str, f: dict, seen: dict) -> bool:
    """Whether an in-stream entry (its raw fields) may reach the job of `owner` under identity: signed by the
    owner or an admin, recent, and not a copy of an entry taken before (`seen`: nonce -> last number)."""
    try:
        kind, user, nonce, seq, ts, sig = (text(f[k]) for k in (b"k", b"u", b"c", b"n", b"t", b"s"))
        n, t = int(seq), float(ts)
    except (KeyError, ValueError, UnicodeDecodeError):
        return False
    if not verifier.may_act_on(user, owner) or abs(time.time() - t) > MAX_SKEW_S or n <= seen.get(nonce, 0):
        return False
    if not verify(verifier.secret, user, sig, "tty", job_id, nonce, n, ts, kind, _payload(kind, f)):
        return False
    seen[nonce] = n
    return True


#: A session's client that waits for it to start says so this often ("wait" on the in-stream), and one not heard
#: from for CLIENT_GONE_S is gone: a client killed outright (SIGKILL, its host gone) cancelled nothing, and the
#: session started later with nobody there, holding its GPUs until --idle-timeout (a hangup or Ctrl-C cancels).
WAIT_EVERY_S, CLIENT_GONE_S = 5.0, 30.0


def client_gone(client, ns: str, job_id: str, now_ms: int) -> float | None:
    """How long a session's client has not been heard from (seconds), once that is past CLIENT_GONE_S; None
    while it is there, or when no client ever wrote (a session started without one)."""
    newest = client.xrevrange(keys.job_tty(ns, job_id, "in"), count=1)
    if not newest:
        return None
    silent_s = (now_ms - int(text(newest[0][0]).partition("-")[0])) / 1000.0
    return silent_s if silent_s > CLIENT_GONE_S else None


def read_input(client, ns: str, job_id: str, after: str, block_ms: int) -> list[tuple[str, dict]]:
    """In-stream entries after `after` ("0-0": all), waiting up to block_ms for one: (id, raw fields)."""
    got = client.xread({keys.job_tty(ns, job_id, "in"): after}, block=block_ms, count=100)
    return [(text(i), f) for _, entries in got for i, f in entries]


def last_size(client, ns: str, job_id: str) -> tuple[int, int] | None:
    """The newest "size" among the in-stream's last entries (the client's terminal before the process starts)."""
    for _, f in client.xrevrange(keys.job_tty(ns, job_id, "in"), count=50):
        if f.get(b"k") == b"size":
            try:
                return int(f[b"rows"]), int(f[b"cols"])
            except (KeyError, ValueError):
                return None
    return None


def add_output(pipe, ns: str, job_id: str, data: bytes) -> None:
    pipe.xadd(keys.job_tty(ns, job_id, "out"), {"k": "out", "d": data}, maxlen=OUT_MAXLEN, approximate=True)


def started(client, ns: str, job_id: str, epoch: int) -> None:
    """The attempt's process runs on its PTY; the streams live while it does (an earlier attempt set a TTL)."""
    out = keys.job_tty(ns, job_id, "out")
    pipe = client.pipeline(transaction=False)
    pipe.xadd(out, {"k": "start", "e": int(epoch)}, maxlen=OUT_MAXLEN, approximate=True)
    pipe.persist(out)
    pipe.execute()


def ended(client, ns: str, job_id: str, code: int, state: str, reason: str) -> None:
    """The session's end (its process's exit `code`, the job's state and reason); the streams expire, and the
    input left for this attempt goes (a rerun must not replay it)."""
    out = keys.job_tty(ns, job_id, "out")
    pipe = client.pipeline(transaction=False)
    pipe.xadd(out, {"k": "end", "code": int(code), "state": state, "reason": reason}, maxlen=OUT_MAXLEN,
              approximate=True)
    pipe.expire(out, ENDED_TTL_S)
    pipe.delete(keys.job_tty(ns, job_id, "in"))
    pipe.execute()


def entry(f: dict) -> dict:
    """An out-stream entry as text fields (and `d` as bytes)."""
    return {text(k): (v if k == b"d" else text(v)) for k, v in f.items()}


def read_output(client, ns: str, job_id: str, after: str, block_ms: int | None) -> list[tuple[str, dict]]:
    """Out-stream entries after `after`, waiting up to block_ms for one (None: not at all)."""
    key = keys.job_tty(ns, job_id, "out")
    if block_ms is None:
        return [(text(i), entry(f)) for i, f in client.xrange(key, min=f"({after}" if after != "0-0" else "-")]
    got = client.xread({key: after}, block=block_ms, count=500)
    return [(text(i), entry(f)) for _, entries in got for i, f in entries]


def tail(client, ns: str, job_id: str, nbytes: int) -> tuple[list[tuple[str, dict]], str]:
    """The newest attempt's last entries holding at least `nbytes` of output (what `attach` shows first), oldest
    first, and the id to read on from."""
    rows, size, last = [], 0, "0-0"
    for i, f in client.xrevrange(keys.job_tty(ns, job_id, "out"), count=OUT_MAXLEN):
        if size >= nbytes:
            break
        e = entry(f)
        last = last if last != "0-0" else text(i)
        rows.append((text(i), e))
        size += len(e.get("d", b""))
        if e.get("k") == "start":
            break
    return rows[::-1], last

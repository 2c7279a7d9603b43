"""Inside a job: asking its node agent, through the job channel (workers/jobchannel.py), for what a
job may do without any credential: record a checkpoint, submit follow-up work as the job's user.

A job's environment holds no Redis URL and no token; the agent gave it DISPATCH_JOB_SOCKET and
DISPATCH_JOB_CAP (a capability for this attempt only). One request per connection, msgpack both ways.
"""

from __future__ import annotations

import os
import socket

from ..core.errors import DispatcherError

#: How long a request may take: a submit waits for the leader's answer (identity on).
TIMEOUT_S = 60.0


class ChannelError(DispatcherError):
    """The node agent refused the job's request, or could not be reached."""


def in_job() -> bool:
    """Whether this process runs inside a dispatch job that has a job channel."""
    return all(os.environ.get(k) for k in ("DISPATCH_JOB_SOCKET", "DISPATCH_JOB_CAP", "DISPATCH_JOB_ID",
                                           "DISPATCH_EPOCH"))


def ask(op: str, **fields) -> dict:
    """Send one request for this job's attempt; its reply (raises ChannelError for a refusal)."""
    import msgpack

    path = os.environ["DISPATCH_JOB_SOCKET"]
    try:
        epoch = int(os.environ["DISPATCH_EPOCH"])
    except ValueError:
        raise ChannelError(f"DISPATCH_EPOCH is {os.environ['DISPATCH_EPOCH']!r}, not a number") from None
    request = {"op": op, "job": os.environ["DISPATCH_JOB_ID"], "epoch": epoch, "cap": os.environ["DISPATCH_JOB_CAP"],
               **fields}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT_S)
        try:
            s.connect(path)
            s.sendall(msgpack.packb(request))
            s.shutdown(socket.SHUT_WR)
            data = bytearray()
            while chunk := s.recv(65536):
                data += chunk
        except OSError as e:
            raise ChannelError(f"cannot reach this job's node agent at {path} ({e.strerror or e}); is its "
                               f"`dispatch worker` still running?") from None
    try:
        reply = msgpack.unpackb(bytes(data), raw=False)
    except Exception:
        reply = None
    if not isinstance(reply, dict):
        raise ChannelError(f"the node agent at {path} sent no answer (it may have stopped meanwhile)")
    if not reply.get("ok"):
        raise ChannelError(f"the node agent refused: {reply.get('error', 'no reason given')}")
    return reply


def checkpointed() -> None:
    ask("checkpointed")


def submit(specs, held: bool = False) -> list[str]:
    """Submit checked specs as this job's user (the agent checks they are); the new job ids. `held`:
    held by that user from the start (submit --hold)."""
    from ..store.codec import encode_spec

    return [str(i) for i in ask("submit", specs=[encode_spec(s) for s in specs], hold=held)["ids"]]

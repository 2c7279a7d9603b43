"""The control channel: a durable command stream per node (preempt, cancel, shrink).

Commands are XADDed to keys.node_control and read by the node agent through the
consumer group "agents" with its node name as consumer, so a command sent while
the agent is down or cut off waits in the stream, and one the agent read but did
not finish stays in its pending list and is read again when it comes back. The
agent acks a command once it has been carried out. The blocking XREADGROUP is the
wake-up; there is no pub/sub to lose. Unknown and malformed commands are logged, acked and
recorded in quarantine: read again and again they would stall the agent's channel.
"""

from __future__ import annotations

import logging

import msgpack

from . import keys

log = logging.getLogger("dispatch.control")

GROUP = "agents"
#: Commands kept per node stream (older ones are trimmed; all are long carried out by then).
STREAM_MAXLEN = 10_000
COMMANDS = ("preempt", "cancel", "shrink")


def ensure_group(client, ns: str, node: str) -> None:
    """Create the stream and its group if missing; idempotent. New groups start at the
    beginning, so commands sent before the node's first agent ever started are not lost."""
    import redis

    try:
        client.xgroup_create(keys.node_control(ns, node), GROUP, id="0", mkstream=True)
    except redis.exceptions.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


def send(client_or_pipe, ns: str, node: str, command: dict) -> None:
    """Queue one command for `node` (on a pipeline, as part of a transaction, or at once)."""
    if command.get("type") not in COMMANDS:
        raise ValueError(f"unknown control command {command.get('type')!r}")
    client_or_pipe.xadd(keys.node_control(ns, node), {b"c": msgpack.packb(command)}, maxlen=STREAM_MAXLEN,
                        approximate=True)


def read(client, ns: str, node: str, *, pending: bool, block_ms: int = 1000, count: int = 100):
    """[(stream id, command dict)]: this consumer's unfinished commands (pending=True), else new ones."""
    got = client.xreadgroup(GROUP, node, {keys.node_control(ns, node): "0" if pending else ">"},
                            count=count, block=None if pending else block_ms)
    out = []
    for _, entries in got or []:
        for entry_id, fields in entries:
            if not fields:  # trimmed away while pending
                ack(client, ns, node, entry_id)
                continue
            try:
                cmd = msgpack.unpackb(fields[b"c"], raw=False)
                malformed(cmd)
            except Exception as e:  # dropped: read again it would stall the agent's channel for good
                log.error("node %s: malformed control command %s (%s); dropped", node, entry_id, e)
                drop(client, ns, node, entry_id, f"malformed control command ({e})")
                continue
            out.append((entry_id, cmd))
    return out


def malformed(cmd) -> None:
    """Raise ValueError unless `cmd` is shaped as send() sends one: a known type, a job id, an integer
    epoch, and the optional fields of their types."""
    from .quarantine import valid_name

    if not isinstance(cmd, dict):
        raise ValueError("not a map")
    if cmd.get("type") not in COMMANDS:
        raise ValueError(f"unknown command {cmd.get('type')!r}")
    if not isinstance(cmd.get("job"), str) or not valid_name(cmd["job"]):
        raise ValueError(f"job {cmd.get('job')!r} is not a job id")
    epoch = cmd.get("epoch")
    if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0):
        raise ValueError(f"epoch {epoch!r} is not a count")
    keep = cmd.get("keep", [])
    if not isinstance(keep, list) or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 4096
                                             for g in keep):
        raise ValueError(f"keep {keep!r} is not a list of GPU indexes")
    for name in ("mode", "by", "reason"):
        if not isinstance(cmd.get(name, ""), str):
            raise ValueError(f"{name} {cmd.get(name)!r} is not text")
    if not isinstance(cmd.get("keep_wait", True), bool):
        raise ValueError(f"keep_wait {cmd.get('keep_wait')!r} is not true or false")


def drop(client, ns: str, node: str, entry_id, reason: str) -> None:
    """Ack a command that cannot be carried out, and record it in quarantine (store/quarantine.py)."""
    import time

    from .quarantine import record

    ack(client, ns, node, entry_id)
    try:
        record(client, ns, keys.node_control(ns, node), entry_id, reason, int(time.time() * 1000))
    except Exception as e:  # the record is for an operator; the channel matters more
        log.warning("node %s: cannot record the dropped command %s (%s)", node, entry_id, e)


def ack(client, ns: str, node: str, entry_id) -> None:
    client.xack(keys.node_control(ns, node), GROUP, entry_id)

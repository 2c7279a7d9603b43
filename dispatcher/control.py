"""The control channel: a durable command stream per node (preempt, cancel, shrink).

Commands are XADDed to keys.node_control and read by the node agent through the
consumer group "agents" with its node name as consumer, so a command sent while
the agent is down or cut off waits in the stream, and one the agent read but did
not finish stays in its pending list and is read again when it comes back. The
agent acks a command once it has been carried out. The blocking XREADGROUP is the
wake-up; there is no pub/sub to lose. Unknown commands are logged and acked.
"""

from __future__ import annotations

import logging

import msgpack

from .store import keys

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
                if not isinstance(cmd, dict):
                    raise ValueError("not a map")
            except Exception as e:
                log.error("node %s: malformed control command %s (%s); dropped", node, entry_id, e)
                ack(client, ns, node, entry_id)
                continue
            out.append((entry_id, cmd))
    return out


def ack(client, ns: str, node: str, entry_id) -> None:
    client.xack(keys.node_control(ns, node), GROUP, entry_id)

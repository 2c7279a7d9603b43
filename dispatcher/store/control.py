"""The control channel: a durable command stream per node (preempt, cancel, shrink, time, requeue).

Commands are XADDed to keys.node_control and read by the node agent through the
consumer group "agents" with its node name as consumer, so a command sent while
the agent is down or cut off waits in the stream, and one the agent read but did
not finish stays in its pending list and is read again when it comes back. The
agent acks a command once it has been carried out. The blocking XREADGROUP is the
wake-up; there is no pub/sub to lose. Unknown and malformed commands are logged, acked and
recorded in quarantine: read again and again they would stall the agent's channel.

A command goes with the transition it carries out, in one step: preempt() marks the job
and queues its command in one script (lua/preempt.lua), cancel() runs cancel.lua and
queues the cancel of an active job in one MULTI/EXEC. A command is a msgpack map
(encode) under the stream field FIELD.
"""

from __future__ import annotations

import logging

import msgpack

from ..core.model import ACTIVE_STATES
from . import job_record, keys
from .scripts import Outcome

log = logging.getLogger("dispatch.control")

GROUP = "agents"
#: Commands kept per node stream (older ones are trimmed; all are long carried out by then).
STREAM_MAXLEN = 10_000
#: time: a running job's new --time (store/pending.py); requeue: back to the queue as at its agent's stop
#: (`dispatch up` stopping its server, requeue_active)
COMMANDS = ("preempt", "cancel", "shrink", "time", "requeue")
#: The stream field a command is stored under.
FIELD = b"c"


def ensure_group(client, ns: str, node: str) -> None:
    """Create the stream and its group if missing; idempotent. New groups start at the
    beginning, so commands sent before the node's first agent ever started are not lost."""
    import redis

    try:
        client.xgroup_create(keys.node_control(ns, node), GROUP, id="0", mkstream=True)
    except redis.exceptions.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


def encode(command: dict) -> bytes:
    """A command as the stream stores it (ValueError for an unknown type)."""
    if command.get("type") not in COMMANDS:
        raise ValueError(f"unknown control command {command.get('type')!r}")
    return msgpack.packb(command)


def send(client_or_pipe, ns: str, node: str, command: dict) -> None:
    """Queue one command for `node` (on a pipeline, as part of a transaction, or at once)."""
    client_or_pipe.xadd(keys.node_control(ns, node), {FIELD: encode(command)}, maxlen=STREAM_MAXLEN,
                        approximate=True)


def preempt(scripts, node: str, job_id: str, epoch: int, now_ms: int, *, by: str, mode: str, reason: str,
            keep=(), keep_wait: bool = True, fence: str = "", client=None):
    """Start preempting a job running on `node` at `epoch` (mode graceful or forced; or shrink, keeping
    GPUs `keep`): it is marked preempting and its command queued on the node's control stream in one
    step (preempt.lua), or neither. The one way a preemption starts: the scheduler's plan, an agent's
    idle requeue, an operator's `dispatch preempt`. `fence`: the leader's lease value ("" = not checked).
    Returns DONE, STALE (not running at that epoch) or NOT_LEADER; on a pipeline, the pipeline."""
    command = {"type": "shrink" if mode == "shrink" else "preempt", "job": job_id, "epoch": epoch, "mode": mode,
               "keep": list(keep), "by": by, "reason": reason, "keep_wait": keep_wait}
    return scripts.preempt(job_id, node, epoch, now_ms, by, mode, reason, encode(command), field=FIELD,
                           cap=STREAM_MAXLEN, fence=fence, client=client)


def cancel(scripts, client, ns: str, job_id: str, now_ms: int, reason: str) -> Outcome:
    """Cancel a job (cancel.lua), and when it is active queue the cancel on its node's control stream in
    the same MULTI/EXEC. The job hash is watched from the read of where it runs to the EXEC (and it all
    runs again if the job changed meanwhile), so the command is queued exactly when cancel.lua asks the
    node (CANCEL_REQUESTED). Returns cancel.lua's Outcome."""
    job = keys.job(ns, job_id)

    def attempt(pipe):
        now = job_record.values(job_record.WHERE, pipe.hmget(job, *job_record.WHERE))
        pipe.multi()
        scripts.cancel(job_id, now_ms, reason, client=pipe)
        if now["state"] in ACTIVE_STATES:
            send(pipe, ns, now["node"], {"type": "cancel", "job": job_id, "epoch": now["epoch"], "reason": reason})

    return Outcome(client.transaction(attempt, job)[0])


def requeue_active(client, ns: str, reason: str, *, now: bool = False) -> list[tuple[str, int]]:
    """Ask the agent of each rank of every active job to stop it and put it back in the queue, as the
    agent's own stop does (its checkpoint signal, SIGKILL after its grace or 10 s; not a lost attempt):
    what `dispatch up` does before its embedded server stops, for the jobs of agents beside it, which
    would otherwise lose their server, kill their jobs and count the attempt lost. With `now` (a second
    Ctrl-C), SIGKILL at once, still requeued. Returns the (job id, epoch) asked."""
    ids = [i.decode() for i in client.zrange(keys.jobs_active(ns), 0, -1)]
    fields = ("state", "node", "epoch", "gang")
    read = client.pipeline(transaction=False)
    for job_id in ids:
        job_record.queue_fields(read, ns, job_id, fields)
    asked, pipe = [], client.pipeline(transaction=False)
    for job_id, reply in zip(ids, read.execute(raise_on_error=False)):
        v = None if isinstance(reply, Exception) else job_record.values(fields, reply)
        if v is None or v["state"] not in ACTIVE_STATES or not v["node"] or v["epoch"] is None:
            continue
        for node in dict.fromkeys([v["node"], *(r.partition(":")[0] for r in (v["gang"] or "").split(";") if r)]):
            send(pipe, ns, node, {"type": "requeue", "job": job_id, "epoch": v["epoch"], "reason": reason,
                                  "mode": "forced" if now else "graceful"})
        asked.append((job_id, v["epoch"]))
    pipe.execute()
    return asked


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
                cmd = msgpack.unpackb(fields[FIELD], raw=False)
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
    limit = cmd.get("time_s")
    if limit is not None and (not isinstance(limit, (int, float)) or isinstance(limit, bool)
                              or not 0 < limit < 10**12):
        raise ValueError(f"time_s {limit!r} is not a time limit in seconds")


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

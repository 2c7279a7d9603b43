"""The node agents beside a `dispatch up` (`dispatch worker` given its server, on this host or others):
before `up` stops its embedded server, their jobs go back to the queue as its own agent's do.

Without this, those agents lost their server with their jobs still running: after 9 s without a
heartbeat taken their keepers killed the jobs (no checkpoint signal) and counted the attempt lost,
against --retries, after `dispatch down` had already returned. Their agents keep running: they wait
for the server and take work again when the next `up` serves it.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("dispatch.up")

#: What the requeued jobs' records say ("...; requeued").
REASON = "dispatch up stopped (its server with it)"
#: How long `up` waits for them: the agents' 10 s grace at most, and a margin; once hurried, at most HURRY_S.
WAIT_S, HURRY_S = 15.0, 3.0


def requeue_beside(url: str, ns: str):
    """Ask every agent to requeue its running jobs (control.requeue_active: up's own agent's too, which
    its stop does anyway); returns what wait_requeued needs, or None when the server does not answer."""
    from ..store import control
    from ..store.connect import connect

    try:
        client = connect(url)
        return client, control.requeue_active(client, ns, REASON)
    except Exception as e:  # (the server away: nothing to ask, and nothing to lose by not asking)
        log.warning("could not ask the node agents to requeue their jobs: %s", e)
        return None


def wait_requeued(asked, ns: str, more, timeout_s: float = WAIT_S) -> None:
    """Until every job asked has left its attempt (requeued, or ended meanwhile), or `timeout_s` passed (an
    agent that is gone). Once more() says a second Ctrl-C hurries the stop, the jobs still running are asked
    again, to be killed at once (still requeued), and waited for HURRY_S at most."""
    from ..store import control, job_record

    if not asked:
        return
    client, jobs = asked
    deadline, hurried = time.monotonic() + timeout_s, False
    while jobs and time.monotonic() < deadline:
        try:
            pipe = client.pipeline(transaction=False)
            for job_id, _ in jobs:
                job_record.queue_fields(pipe, ns, job_id, ("state", "epoch"))
            now = [job_record.values(("state", "epoch"), r) for r in pipe.execute()]
            jobs = [(j, e) for (j, e), v in zip(jobs, now) if v["epoch"] == e and v["state"] in ("running", "preempting")]
            if jobs and more() and not hurried:
                hurried, deadline = True, min(deadline, time.monotonic() + HURRY_S)
                control.requeue_active(client, ns, REASON, now=True)
        except Exception as e:
            log.warning("could not see the node agents' jobs requeued: %s", e)
            return
        time.sleep(0.1)
    if jobs:
        log.warning("%d jobs of other node agents were still running as the server stopped (%s): their agents "
                    "will count those attempts lost", len(jobs), ", ".join(j for j, _ in jobs[:10]))

"""Telling a job's end to its --notify (core/outputs.py): who does it, and the POST to a URL.

Who tells: the node agent that ran the job, for a job that ran (workers/notifying.py): a command runs on
that node as the job's user, in its working directory, as the job itself did; a URL is POSTed from there.
A job that ended with no agent (cancelled while pending, failed by its dependency; or ended by the scheduler
with its node dead: out of --retries, or an end its keeper saw) is queued by cancel.lua or finish.lua on
keys.jobs_notify, and the leading scheduler POSTs to its URL (Notifier): it never runs a user's
command as itself, so such a job's --notify command is not run (its log stream says so). Each end is told once:
whoever tells it first takes the record's `notified` (job_record.claim_notify), which a gang's other
ranks and a requeue find taken, and a requeue is no end (only a final state is told). Telling never
holds up recording the end: it comes after it, in threads, with a timeout, and its failures are logged.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from .clock import now_ms
from .core.errors import MalformedRecord
from .core.model import FINAL_STATES, JobSpec
from .core.outputs import end_body, is_url
from .store import job_record, keys
from .store.codec import decode_spec
from .store.connect import text
from .store.jobs import append_log

log = logging.getLogger("dispatch.notify")

#: A URL or a command gets this long to answer or finish.
TIMEOUT_S = 30.0
#: Ended jobs the leader takes from its queue per cycle.
BATCH = 100


def post(url: str, body: dict, timeout: float = TIMEOUT_S) -> int:
    """POST `body` as JSON to `url`; the HTTP status (an error status or no answer raises)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "dispatch"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (http(s) only: parse_notify)
        return answer.status


def ended(client, ns: str, job_id: str) -> tuple[JobSpec, dict] | None:
    """The spec and the end ({job_id, state, exit_code, reason, name}: end_body) of an ended job with a
    --notify not told yet; None if it has none, is not ended, or was told."""
    rec = job_record.read_fields(client, ns, job_id, job_record.NOTIFY)
    if rec["state"] not in FINAL_STATES or rec["notified"]:
        return None
    try:
        spec = decode_spec(rec["spec"], key=keys.job(ns, job_id))
    except MalformedRecord:
        return None
    if not spec.notify:
        return None
    return spec, end_body(job_id, rec["state"], rec["exit_code"], rec["reason"], spec.name)


def failed(client, ns: str, job_id: str, error: Exception) -> None:
    """Say where people look that telling the job's end failed: its record's notify_error (`dispatch
    show`) and its log stream. Not retried: an end is told at most once."""
    why = " ".join(str(error).split())[:300] or type(error).__name__
    try:
        client.hset(keys.job(ns, job_id), "notify_error", why)
        append_log(client, ns, job_id, f"[dispatch: --notify failed: {why}]\n".encode())
    except Exception as e:  # Redis away: the agent's or the scheduler's log has it
        log.warning("job %s: could not record that its --notify failed (%s)", job_id, e)


class Notifier:
    """The leading scheduler's: POSTs the ends cancel.lua queued (jobs no agent ran), in its own threads."""

    def __init__(self, client, ns: str):
        self.client, self.ns = client, ns
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="notify")

    def drain(self) -> int:
        """Take what is queued (one LPOP a cycle) and tell each in the pool; how many were taken."""
        got = self.client.lpop(keys.jobs_notify(self.ns), BATCH) or []
        for raw in got:
            self.pool.submit(self._tell, text(raw))
        return len(got)

    def _tell(self, job_id: str) -> None:
        try:
            found = ended(self.client, self.ns, job_id)
            if found is None:
                return
            spec, body = found
            if not is_url(spec.notify):  # said where its user looks (dispatch logs)
                append_log(self.client, self.ns, job_id, b"[dispatch: --notify command not run: no node was there "
                           b"to run it at the job's end (it had not run, or its node was lost; only a URL is "
                           b"told then)]\n")
                return
            if job_record.claim_notify(self.client, self.ns, job_id, f"scheduler {now_ms()}"):
                post(spec.notify, body)
                log.info("job %s: its end (%s) told to %s", job_id, body["state"], spec.notify)
        except Exception as e:  # a URL down, or Redis away: logged, never retried (told at most once)
            log.warning("job %s: --notify failed: %s", job_id, e)
            failed(self.client, self.ns, job_id, e)

    def close(self) -> None:
        self.pool.shutdown(wait=False)

"""The dashboard's page of ended jobs (`/finished`, `/api/finished`): the newest ended jobs, by state and
user, a page at a time, read from the ended-jobs indexes (store/ended.py: one per final state, by end
time). A page costs its own jobs' records, whatever the history's length: without a user filter the
indexes' newest (page + 1) * per ids and the page's records; with one, the users of the newest ended
jobs are read in batches until the page fills (at most store.ended.LOOK_LIMIT of them: the answer says
when it stopped there)."""

from __future__ import annotations

from ..core.errors import InvalidRequestError
from ..core.model import FINAL_STATES
from ..store.ended import LOOK_LIMIT, ended_ids
from ..store.jobs import read_jobs

#: The states the page filters by: each final state, or all of them.
FILTERS = ("failed", "cancelled", "succeeded", "all")
#: Rows a page holds at most.
MAX_PER = 200


def finished_page(client, ns: str, state: str = "failed", user: str = "", page: int = 0, per: int = 25) -> dict:
    """One page of ended jobs, newest end first: each job's id, name, user, class, state, reason, exit
    code, attempt, GPUs and times; `total` (None with a user filter: not counted), `more` (a next page
    has jobs) and `cut` (with a user filter: only the newest LOOK_LIMIT ended jobs were looked at)."""
    if state not in FILTERS:
        raise InvalidRequestError(f"state must be one of {', '.join(FILTERS)}", field="state")
    if page < 0 or not 0 < per <= MAX_PER:
        raise InvalidRequestError(f"page is 0 or more, per 1 to {MAX_PER}", field="per")
    user = user.strip()
    states = FINAL_STATES if state == "all" else (state,)
    got = ended_ids(client, ns, states, user=user, skip=page * per, count=per)
    rows = [_row(j) for j in read_jobs(client, ns, got["ids"]) if j["state"] in states]  # (requeued since: left out)
    return {"state": state, "user": user, "page": page, "per": per, "jobs": rows, "total": got["total"],
            "more": got["more"], "cut": got["cut"], "look_limit": LOOK_LIMIT}


def _row(j: dict) -> dict:
    return {k: j[k] for k in ("id", "name", "user", "priority", "state", "reason", "exit_code", "exit_status", "signal", "attempt",
                              "gpus_requested", "submitted_at", "started_at", "finished_at", "node")}

"""The dashboard's search (/api/search?q=): jobs by id (12, or an array's element 12_3), by user, by team
and by name (a substring, or a shell glob like sweep-*), among the pending, running and recently finished
jobs, with state and class filters on what it finds.

A search never decodes the whole queue. It looks at every active job (as many as the cluster's GPUs can
hold) and at the newest SEARCHED jobs of the all-jobs index, and says so ("searched the newest 20,000 of
100,000 jobs"); an id is looked up directly, however old, with no scan. Of each job it reads only its
state and epoch (scripted reads of many records at once, store/scripts.hget_each, not a command per job)
and decodes its spec once per (job, epoch): a spec changes only with its epoch (dispatch update), so the
specs of the jobs last looked at are kept. The page's rows alone are read whole (job_record.SEARCH). The
filter is
core/selection.Selection, the one `dispatch queue -u USER --name GLOB --team T` uses. An answer is kept
CACHE_S seconds per query: typing, paging and a polling page cost one search a few seconds.
"""

from __future__ import annotations

import threading
import time

from ..clock import now_ms
from ..core.arrays import element_name, is_number, label
from ..core.errors import InvalidRequestError, JobNotFound, MalformedRecord
from ..core.model import FINAL_STATES, PRIORITIES
from ..core.selection import Selection, selection
from ..store import job_record, keys, scripts
from ..store.codec import decode_spec
from ..store.connect import text
from ..store.jobs import read_named
from ..store.quarantine import valid_name

#: The newest jobs of the all-jobs index a search by user, team or name looks at (every active job too).
SEARCHED = 20_000
#: How long an answer is kept for the same query (paging, the page's polling, a repeated keystroke).
CACHE_S = 5.0
#: The most jobs one page of results lists.
PER_MAX = 100
#: The longest query taken.
MAX_QUERY = 200
#: Prefixes a word may carry to say what it is: user:alice, team:nlp, name:sweep-*, id:12_3.
PREFIXES = ("id", "user", "team", "name")
_GLOB = set("*?[")


def words(q: str) -> list[tuple[str, str]]:
    """The query as (kind, value) words: kind is one of PREFIXES, or "" for a bare word (any of them)."""
    out = []
    for word in q.split():
        kind, sep, value = word.partition(":")
        out.append((kind, value) if sep and kind in PREFIXES and value else ("", word))
    return out


def name_glob(value: str) -> str:
    """A name filter: a glob as given, else a substring (`sweep` is `*sweep*`)."""
    return value if _GLOB & set(value) else f"*{value}*"


def conditions(q: str) -> list[list]:
    """Each word of the query as the alternatives a job may match it by (a Selection, or an id string);
    a job is found when it matches every word."""
    out = []
    for kind, value in words(q):
        alts: list = []
        if kind in ("", "id") and (is_number(value) or element_name(value)):
            out.append([value])  # an id-shaped word is the id (name:12 for a name with 12 in it)
            continue
        if kind in ("", "user"):
            alts.append(Selection(users=(value,)))
        if kind in ("", "team"):
            alts.append(Selection(teams=(value,)))
        if kind in ("", "name"):
            alts.append(Selection(names=(name_glob(value),)))
        out.append(alts)
    return out


def _is(job: dict, alt) -> bool:
    if isinstance(alt, str):  # an id: the job, an array (its first element's id), or one element
        return alt in (job["id"], job["array_of"], f"{job['array_of']}_{job['array_index']}")
    return alt.matches(job)


class Search:
    """One per dashboard process: the specs of the jobs last looked at and the answers of the last few
    seconds. Searches run one at a time (a burst of keystrokes is one read of Redis after another, not
    many at once)."""

    def __init__(self, client, ns: str, *, searched: int = SEARCHED, cache_s: float = CACHE_S):
        self.client, self.ns, self.searched, self.cache_s = client, ns, searched, cache_s
        self._specs: dict[str, tuple[int, dict]] = {}  # job id -> (epoch, its light fields)
        self._answers: dict[tuple, tuple[float, dict]] = {}
        self._lock = threading.Lock()

    def find(self, q: str, state: str = "", cls: str = "", page: int = 0, per: int = 25) -> dict:
        """One page of the jobs matching `q` (those holding GPUs, then pending, then finished ones, each
        newest first), with how many match and how many were looked at. `state`: a state, or active, done, all;
        `cls`: a class. The page's rows are read as they are now (a handful of records)."""
        q = " ".join(str(q).split())
        if len(q) > MAX_QUERY:
            raise InvalidRequestError(f"the query is {len(q)} characters; at most {MAX_QUERY}", field="q")
        states = selection(states=[state]).states if state else frozenset()
        if cls and cls not in PRIORITIES:
            raise InvalidRequestError(f"class {cls!r}: one of {', '.join(PRIORITIES)}", field="class")
        per = max(1, min(per, PER_MAX))
        key = (q, state, cls)
        with self._lock:
            at, found = self._answers.get(key, (-1e18, None))
            if found is None or time.monotonic() - at > self.cache_s:
                found = self._find(q, states, cls)
                self._answers = {k: v for k, v in self._answers.items() if time.monotonic() - v[0] <= self.cache_s}
                self._answers[key] = (time.monotonic(), found)
        hits = found["hits"]
        pages = max(1, -(-len(hits) // per))
        page = max(0, min(page, pages - 1))
        head = {k: v for k, v in found.items() if k != "hits"}
        return {**head, "total": len(hits), "page": page, "pages": pages, "per": per,
                "jobs": self._rows(hits[page * per:(page + 1) * per])}

    def _find(self, q: str, states: frozenset, cls: str) -> dict:
        t0, now = time.monotonic(), now_ms()
        want = conditions(q)
        head = {"q": q, "state": ",".join(sorted(states)), "class": cls, "at": now / 1000.0}
        if not want:
            return {**head, "hits": [], "searched": 0, "of": 0, "words": "type an id, a user, a team or a name",
                    "took_ms": 0}
        by_id = all(any(isinstance(a, str) for a in alts) for alts in want)  # ids alone: no scan
        ids, of = self._candidates(want, scan=not by_id)
        only = Selection(states=states)
        hits = [j for j in self._light(ids) if only.matches(j) and (not cls or j["priority"] == cls)
                and all(any(_is(j, alt) for alt in alts) for alts in want)]
        hits.sort(key=lambda j: (2 if j["state"] in FINAL_STATES else j["state"] == "pending",
                                 -int(j["id"]) if j["id"].isdigit() else 0))
        said = ("looked up by id" if by_id else f"searched all {of:,} jobs" if len(ids) >= of else
                f"searched the newest {min(self.searched, of):,} of {of:,} jobs and every active one")
        return {**head, "hits": hits, "searched": len(ids), "of": of, "words": said,
                "took_ms": round(1000 * (time.monotonic() - t0), 1)}

    def _candidates(self, want: list[list], scan: bool) -> tuple[list[str], int]:
        """Every active job and the newest `searched` (with `scan`), and the jobs the query names by id:
        their ids (no repeats), and how many jobs the all-jobs index holds."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(keys.jobs_all(self.ns))
        if scan:
            pipe.zrange(keys.jobs_active(self.ns), 0, -1)
            pipe.zrange(keys.jobs_all(self.ns), -self.searched, -1)
        of, *got = (r if not isinstance(r, Exception) else [] for r in pipe.execute(raise_on_error=False))
        ids = dict.fromkeys(text(i) for part in got for i in part if valid_name(i))
        for alt in {a for alts in want for a in alts if isinstance(a, str)}:
            try:
                ids.update(dict.fromkeys(j["id"] for j in read_named(self.client, self.ns, [alt])))
            except (JobNotFound, MalformedRecord):
                continue
        return list(ids), of if isinstance(of, int) else 0

    def _light(self, ids: list[str]) -> list[dict]:
        """What a search matches each job by: its state, and its spec's name, user, team and class (decoded
        once per epoch), in three scripted reads (store/scripts.hget_each), not a command per job. Jobs
        whose record is gone or unreadable are left out."""
        hashes = [keys.job(self.ns, i) for i in ids]
        states, epochs = (scripts.hget_each(self.client, hashes, f) if ids else [] for f in ("state", "epoch"))
        now = {i: (text(st), text(ep)) for i, st, ep in zip(ids, states, epochs)
               if isinstance(st, bytes) and isinstance(ep, bytes)}
        specs = {i: self._specs[i] for i, (_, ep) in now.items() if self._specs.get(i, ("",))[0] == ep}
        todo = [i for i in now if i not in specs]
        for i, raw in zip(todo, scripts.hget_each(self.client, [keys.job(self.ns, i) for i in todo], "spec")
                          if todo else ()):
            try:
                sp = decode_spec(raw, key=f"job {i}")
            except MalformedRecord:
                continue
            specs[i] = (now[i][1], {"name": sp.name, "user": sp.user, "team": sp.team, "priority": sp.priority,
                                    "gpus_requested": sp.gpus, "array_of": sp.array_of,
                                    "array_index": sp.array_index})
        self._specs = specs  # the jobs looked at this time: the cache never outgrows one search
        return [{"id": i, "state": now[i][0], **specs[i][1]} for i in ids if i in specs]

    def _rows(self, hits: list[dict]) -> list[dict]:
        """The page's jobs as they are now: their state fields read again (job_record.SEARCH)."""
        pipe = self.client.pipeline(transaction=False)
        for j in hits:
            job_record.queue_fields(pipe, self.ns, j["id"], job_record.SEARCH)
        now = now_ms()
        return [_row({**j, **job_record.values(job_record.SEARCH, r)}, now)
                for j, r in zip(hits, pipe.execute(raise_on_error=False) if hits else ())
                if isinstance(r, list) and r[0] is not None]


def _row(j: dict, now: int) -> dict:
    """A found job as the page lists it: wait (submit to start, or to now while pending) and run time."""
    def secs(a: int, b: int) -> float | None:
        return round((b - a) / 1000.0, 1) if a and b and b >= a else None

    pending = j["state"] == "pending"  # (a requeued job keeps its last attempt's start)
    return {"id": j["id"], "name": j["name"], "user": j["user"], "team": j["team"], "class": j["priority"],
            "state": j["state"], "gpus_requested": j["gpus_requested"], "node": j["node"] or None,
            "gpus": list(j["gpus"]), "label": label(j),
            "wait_s": secs(j["submit_ms"], now if pending else j["started_ms"]),
            "run_s": None if pending or not j["started_ms"] else secs(j["started_ms"], j["finished_ms"] or now)}

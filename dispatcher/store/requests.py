"""Signed requests, for clusters with identity on (dispatcher/auth/identity.py).

A client XADDs {id, kind, user, ts, body (msgpack), sig} to keys.requests and waits
on keys.reply(id). The leading scheduler reads the requests after the last one it
handled (keys.requests_done), checks each signature and time, carries it out as
that user, and answers. A submit is written in the same transaction that records
the request as handled, so a scheduler killed mid-way never submits twice; cancel
and preempt are idempotent; so are drain and resume, an admin's (store/nodes.py). A requeue (of an ended job:
store/ended.py) is refused once the job is back in the queue, so it too runs at most once.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

import msgpack

from ..core.errors import DispatcherError, InvalidRequestError
from ..auth.identity import MAX_SKEW_S, NotAllowed, Verifier, seal_job, sign
from . import keys
from .codec import decode_spec
from .connect import ride_out, text, transient
from .quarantine import Entry, quarantine

log = logging.getLogger("dispatch.requests")

KINDS = ("submit", "cancel", "preempt", "job-submit", "hold", "release", "update", "drain", "resume", "requeue")
#: How long the leader remembers a handled request's id: the whole window in which its signature's time
#: is accepted (MAX_SKEW_S either side), and a minute more.
SEEN_TTL_S = int(2 * MAX_SKEW_S + 60)
REQUESTS_MAXLEN = 100_000
REPLY_TTL_S = 60
#: A request's seen-mark once its sender took it back (_withdraw): no scheduler carries it out.
WITHDRAWN = "withdrawn"
#: A scheduler's seen-mark while it carries a request out, until the answer's transaction marks it
#: handled (its entry id): a sender can no longer take it back, and a scheduler that took over from
#: one that died meanwhile carries it out.
CLAIM = "claim:"
#: How long a sender waits on for the answer of a request a scheduler claimed just as it gave up.
CLAIMED_WAIT_S = 5.0
#: The longest one wait for an answer blocks: within redis-py's socket timeout (5 s by default), which
#: a longer BLPOP ran into, told as a server restarting while the request stayed to be carried out.
REPLY_SLICE_S = 1.0
MAX_BODY_BYTES = 2 * 1024 * 1024
#: Specs in one signed submit, and their encoded bytes (a spec is at most 256 KiB: codec.py).
MAX_SPECS, SPECS_BYTES = 1000, 1024 * 1024
_STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?")


def published_admins(client, ns: str) -> frozenset[str]:
    """The admins the leading scheduler published with identity's mode (keys.auth)."""
    return frozenset(a for a in text(client.hget(keys.auth(ns), "admins")).split(",") if a)


def identity_on(client, ns: str) -> bool:
    return text(client.hget(keys.auth(ns), "mode")) == "hmac"


def send(client, ns: str, kind: str, user: str, token: str, body: dict, timeout_s: float = 15.0) -> dict:
    """Send one signed request and wait for the scheduler's answer (raises its error)."""
    rid, ts = uuid.uuid4().hex, f"{time.time():.3f}"
    raw = msgpack.packb(body)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(keys.requests(ns), {"id": rid, "kind": kind, "user": user, "ts": ts, "body": raw,
                                  "sig": sign(token, kind, rid, user, ts, raw)},
              maxlen=REQUESTS_MAXLEN, approximate=True)
    pipe.publish(keys.events(ns), b"request")
    entry = pipe.execute()[0]
    got, deadline = None, time.monotonic() + timeout_s
    while got is None and time.monotonic() < deadline:  # in slices within the client's socket timeout (5 s)
        wait_s = min(REPLY_SLICE_S, max(0.1, deadline - time.monotonic()))
        got = ride_out(lambda: client.blpop([keys.reply(ns, rid)], timeout=wait_s))
    withdrawn = False
    if got is None:
        got, withdrawn = _withdraw(client, ns, entry, rid)
    if got is None:
        then = ("so it was withdrawn: nothing was done; check that `dispatch up` (or `dispatch scheduler`, with "
                "--secret-file) runs, then try again" if withdrawn else "it may still be carried out once a "
                "scheduler runs: look for it in `dispatch queue` before you send it again")
        raise DispatcherError(f"no scheduler answered the {kind} request within {timeout_s:g}s; {then}")
    answer = msgpack.unpackb(got[1], raw=False)
    if not answer.get("ok"):
        err = (NotAllowed if answer.get("denied") else InvalidRequestError)(answer.get("error", "refused"))
        if isinstance(answer.get("code"), int):  # the error's own exit code (a job not pending: 1, as without identity)
            err.exit_code = answer["code"]
        raise err
    return answer


def _withdraw(client, ns: str, entry, rid: str) -> tuple[tuple | None, bool]:
    """Take back a request no scheduler answered, so that one that comes back later does not carry out
    what its sender was told did not happen (a resubmit then ran the job twice); an answer written
    meanwhile still counts. Returns (the answer as BLPOP gives it, or None; whether it was taken back).
    The request's seen-mark decides between the two sides: it is taken back only if no scheduler has
    claimed it (RequestServer._claim), and a scheduler that read it before finds it WITHDRAWN. A claimed
    one is being carried out: its answer is waited for a little longer. A login that may not delete
    requests (the user and agent roles: store/roles.py) cannot take it back."""
    import redis

    seen = keys.request_seen(ns, rid)
    try:
        with client.pipeline(transaction=True) as pipe:
            pipe.watch(seen)
            if pipe.get(seen) is None:
                pipe.multi()
                pipe.set(seen, WITHDRAWN, ex=SEEN_TTL_S)
                pipe.xdel(keys.requests(ns), entry)
                pipe.lpop(keys.reply(ns, rid))
                answer = pipe.execute()[2]
                return (None if answer is None else (keys.reply(ns, rid), answer)), True
    except redis.exceptions.WatchError:
        pass  # claimed meanwhile
    except redis.exceptions.NoPermissionError:
        return ride_out(lambda: client.blpop([keys.reply(ns, rid)], timeout=0.01)), False
    return ride_out(lambda: client.blpop([keys.reply(ns, rid)], timeout=CLAIMED_WAIT_S)), False


class Replayed(NotAllowed):
    """A request whose id the leader has handled already."""


class RequestServer:
    """The leading scheduler's side: handle every request after the last one handled."""

    def __init__(self, client, ns: str, verifier: Verifier, scripts, clock=time.time):
        self.client, self.ns, self.verifier, self.scripts, self.clock = client, ns, verifier, scripts, clock

    def publish_mode(self) -> None:  # (the admins too: a scheduler started without --admins takes them)
        self.client.hset(keys.auth(self.ns), mapping={"mode": "hmac", "admins": ",".join(sorted(self.verifier.admins))})

    def serve(self, batch: int = 500) -> int:
        """Handle waiting requests; returns how many. A mark of the last one handled that is no stream
        id is quarantined and moved to the newest request (those between are not handled: their
        senders time out; none runs twice)."""
        done = text(self.client.get(keys.requests_done(self.ns))) or "0"
        if not _STREAM_ID.fullmatch(done):
            newest = self.client.xrevrange(keys.requests(self.ns), count=1)
            quarantine(self.client, self.ns, [Entry(keys.requests_done(self.ns), "", "not a stream id", "value", done,
                                                    restore=text(newest[0][0]) if newest else "0", kind="string")],
                       int(self.clock() * 1000))
            return 0
        entries = self.client.xrange(keys.requests(self.ns), min=f"({done}", count=batch)
        for entry_id, fields in entries:
            self._handle(text(entry_id), {text(k): v for k, v in fields.items()})
        return len(entries)

    def _handle(self, entry_id: str, f: dict) -> None:
        rid = text(f.get("id"))[:64]

        def record(pipe, answer: dict) -> None:  # the answer, and this request marked handled
            if rid:
                pipe.rpush(keys.reply(self.ns, rid), msgpack.packb(answer))
                pipe.expire(keys.reply(self.ns, rid), REPLY_TTL_S)
                if not answer.get("replay"):  # (a replay must not extend the window of its original)
                    pipe.set(keys.request_seen(self.ns, rid), entry_id, ex=SEEN_TTL_S)
            pipe.set(keys.requests_done(self.ns), entry_id)

        try:
            answer = self._carry_out(entry_id, f, record)
        except Replayed as e:
            answer = {"ok": False, "denied": True, "replay": True, "error": str(e)}
            log.warning("request %s (%s by %s) refused: %s", entry_id, text(f.get("kind")), text(f.get("user")), e)
        except NotAllowed as e:
            answer = {"ok": False, "denied": True, "error": str(e)}
        except DispatcherError as e:
            answer = {"ok": False, "error": str(e), "code": e.exit_code}
        except Exception as e:  # a hostile request must not stop the scheduler
            if transient(e):  # the server went away meanwhile: not handled (nor marked so), taken up again by
                raise  # whichever scheduler leads once it is back; its sender waits or is told it restarts
            log.warning("request %s refused: %s: %s", entry_id, type(e).__name__, e)
            answer = {"ok": False, "error": f"malformed request ({type(e).__name__})"}
        if answer is not None:  # (a submit recorded itself in the transaction that wrote the job)
            pipe = self.client.pipeline(transaction=True)
            record(pipe, answer)
            for got in pipe.execute(raise_on_error=False):  # a reply key of the wrong type costs the answer only
                if isinstance(got, Exception):
                    log.warning("request %s: cannot answer (%s)", entry_id, got)
        if answer is not None and not answer["ok"]:
            log.info("request %s (%s by %s) refused: %s", entry_id, text(f.get("kind")), text(f.get("user")),
                     answer["error"])

    def _carry_out(self, entry_id: str, f: dict, record) -> dict | None:
        kind, rid, user, ts, raw, sig = (f.get(k) for k in ("kind", "id", "user", "ts", "body", "sig"))
        kind, rid, user, ts, sig = text(kind), text(rid), text(user), text(ts), text(sig)
        if kind not in KINDS or not rid or not user or not isinstance(raw, bytes) or len(raw) > MAX_BODY_BYTES:
            raise InvalidRequestError("malformed request")
        body = msgpack.unpackb(raw, raw=False)
        if not isinstance(body, dict):
            raise InvalidRequestError("malformed request body")
        if kind == "job-submit":  # from inside a running job: signed with its attempt's capability
            job_id, epoch = str(body.get("job", "")), str(body.get("epoch", ""))
            if not self.verifier.request_ok_with(self._capability(job_id, epoch, user), sig, kind, rid, user, ts, raw):
                raise NotAllowed(f"the job capability does not match job {job_id} attempt {epoch} of {user!r}")
        elif not self.verifier.request_ok(user, sig, kind, rid, user, ts, raw):
            raise NotAllowed(f"signature does not match user {user!r}; check your token (DISPATCH_TOKEN)")
        if abs(self.clock() - float(ts)) > MAX_SKEW_S:
            raise NotAllowed(f"request signed at {ts}, over {MAX_SKEW_S:.0f}s from the scheduler's clock")
        self._claim(entry_id, rid, user)
        if kind in ("submit", "job-submit"):
            return self._submit(user, body, record)
        if kind in ("drain", "resume"):
            return self._node(kind, user, body)
        return self._act(kind, user, body)

    def _claim(self, entry_id: str, rid: str, user: str) -> None:
        """Mark the request as being carried out (CLAIM), unless it was handled (a replay) or its sender
        took it back (_withdraw); a claim left by a scheduler that died before it answered is taken over."""
        seen_key = keys.request_seen(self.ns, rid)
        if self.client.set(seen_key, CLAIM + entry_id, nx=True, ex=SEEN_TTL_S):
            return
        seen = text(self.client.get(seen_key))
        if seen == WITHDRAWN:
            raise DispatcherError(f"request {rid} by {user!r} was taken back by its sender (no answer in time); "
                                  "not carried out")
        if not seen.startswith(CLAIM):
            raise Replayed(f"request {rid} by {user!r} was already handled (entry {seen}); a replay is refused")

    def _capability(self, job_id: str, epoch: str, user: str) -> str:
        """The capability of job_id's attempt `epoch`, if that attempt runs now as `user`; raises otherwise."""
        from ..auth.identity import job_capability
        from .jobs import read_job

        job = read_job(self.client, self.ns, job_id)
        if job["user"] != user or str(job["epoch"]) != epoch or job["state"] not in ("assigned", "running"):
            raise NotAllowed(f"job {job_id} attempt {epoch} of {user!r} is not running; its capability has expired")
        return job_capability(self.verifier.secret, job_id, epoch, user)

    def _submit(self, user: str, body: dict, record) -> None:
        """Write the request's specs as `user`'s jobs, sealed under their ids (identity.seal_job), in one
        transaction with the request's answer. The request's signature covers the specs' bytes."""
        from .jobs import write_jobs

        raw_specs = body.get("specs")
        if not isinstance(raw_specs, list) or not 0 < len(raw_specs) <= MAX_SPECS:
            raise InvalidRequestError(f"malformed submit: 1 to {MAX_SPECS} specs are needed")
        specs = [decode_spec(raw, key="submitted spec") for raw in raw_specs]
        for spec in specs:
            if spec.user != user:
                raise NotAllowed(f"user {user!r} may not submit a job as {spec.user!r}: with identity on (dispatch "
                                 "up), each user submits as themself (dispatch login); --user names another only "
                                 "with identity off")
        write_jobs(self.client, self.ns, specs, held_by=user if body.get("hold") is True else "",
                   sealed=lambda job_id, stored: seal_job(self.verifier.secret, user, job_id, stored),
                   also=lambda pipe, ids: record(pipe, {"ok": True, "ids": ids}))
        return None

    def _act(self, kind: str, user: str, body: dict) -> dict:
        from .jobs import cancel_job, preempt_job, read_job
        from .pending import hold_job, update_job

        job_id = str(body.get("job", ""))
        owner = read_job(self.client, self.ns, job_id)["user"]
        if not self.verifier.may_act_on(user, owner):
            raise NotAllowed(f"job {job_id} belongs to {owner}; only its owner or an admin may {kind} it")
        now = int(self.clock() * 1000)
        if kind == "cancel":
            return {"ok": True, "outcome": cancel_job(self.scripts, self.client, self.ns, job_id, now,
                                                      f"cancelled by {user}")}
        if kind == "requeue":
            from .ended import requeue_job

            return {"ok": True, "outcome": requeue_job(self.scripts, self.client, self.ns, job_id, user, now)}
        if kind in ("hold", "release"):
            return {"ok": True, "outcome": hold_job(self.scripts, self.client, self.ns, job_id, kind, user, now)}
        if kind == "update":
            changes = body.get("changes")
            if not isinstance(changes, dict) or not all(isinstance(v, str) for v in changes.values()):
                raise InvalidRequestError("malformed update: its changes are a map of flag to text")
            return {"ok": True, "outcome": update_job(
                self.client, self.ns, job_id, changes,
                sealed=lambda jid, stored: seal_job(self.verifier.secret, owner, jid, stored))}
        mode = preempt_job(self.scripts, self.client, self.ns, job_id, now, force=bool(body.get("force")),
                           by=f"user {user}")
        return {"ok": True, "outcome": mode}


    def _node(self, kind: str, user: str, body: dict) -> dict:
        """Drain or resume a node: an admin's action (--admins). Answers the mark it replaced or took."""
        from . import nodes

        if user not in self.verifier.admins:
            raise NotAllowed(f"only an admin may {kind} a node; {user!r} is none (dispatch scheduler --admins)")
        name = str(body.get("node", ""))
        if kind == "drain":
            was = nodes.drain(self.client, self.ns, name, str(body.get("reason", "")), user, int(self.clock() * 1000))
        else:
            was = nodes.resume(self.client, self.ns, name)
        return {"ok": True, "was": None if was is None else vars(was)}


# -- the client's side ---------------------------------------------------------------------------
def own_token() -> str:
    """This user's identity token ($DISPATCH_TOKEN or its file); a ConfigError saying how to get one."""
    from ..core.errors import ConfigError
    from ..auth.identity import client_token

    token = client_token()
    if not token:
        raise ConfigError("this cluster has identity on: put your token in $DISPATCH_TOKEN or "
                          "~/.config/dispatch/token (an admin makes it: dispatch auth token USER)", key="token")
    return token


def submit_signed(client, ns: str, specs, requester: str, held: bool = False) -> list[str]:
    """`requester` submits specs (for themself: each spec's user must be them) through the leader, in
    as few signed requests as fit (MAX_SPECS specs, SPECS_BYTES of them, each); returns the job ids.
    Each request is written at once; if one is refused, the ones before it stand. `held`: held by
    `requester` from the start (submit --hold)."""
    token = own_token()
    return [str(i) for batch in _batches(specs) for i in send(client, ns, "submit", requester, token,
                                                               {"specs": batch, "hold": held})["ids"]]


def _batches(specs):
    from .codec import encode_spec

    batch, size, array = [], 0, ""
    for spec in specs:
        raw = encode_spec(spec)
        starts = spec.array_of != array and spec.array_count  # an array is written whole, in one request
        array = spec.array_of
        if batch and (len(batch) == MAX_SPECS or size + len(raw) > SPECS_BYTES
                      or (starts and len(batch) + spec.array_count > MAX_SPECS)):
            yield batch
            batch, size = [], 0
        batch.append(raw)
        size += len(raw)
    if batch:
        yield batch


def submit_specs(client, ns: str, specs, requester: str, held: bool = False) -> list[str]:
    """Submit checked specs: in one transaction, or as signed requests while identity is on. `held`:
    held by `requester` from the start (submit --hold)."""
    from .jobs import write_jobs

    if identity_on(client, ns):
        return submit_signed(client, ns, specs, requester, held)
    return write_jobs(client, ns, specs, held_by=requester if held else "")


def submit_for_job(client, ns: str, specs, job_id: str, epoch, cap: str, held: bool = False) -> list[str]:
    """What a node agent sends for `dispatch submit` run inside job `job_id`'s attempt `epoch`: the specs
    (their user must be the job's), signed with the attempt's capability (identity.job_capability), which
    the leader checks together with that attempt still running. Returns the new job ids."""
    return [str(i) for batch in _batches(specs) for i in send(
        client, ns, "job-submit", specs[0].user, cap,
        {"specs": batch, "job": str(job_id), "epoch": str(epoch), "hold": held})["ids"]]


def node_signed(client, ns: str, kind: str, user: str, node: str, reason: str = ""):
    """Drain or resume `node` as `user` (an admin); returns the mark it replaced or took (store.nodes.Drain),
    or None."""
    from .nodes import Drain

    was = send(client, ns, kind, user, own_token(), {"node": node, "reason": reason})["was"]
    return None if was is None else Drain(str(was["reason"]), str(was["by"]), int(was["at_ms"]))


def act_signed(client, ns: str, kind: str, user: str, job_id: str, **extra) -> str:
    """Cancel, preempt, hold, release or requeue a job as `user` (its owner or an admin); returns the outcome."""
    return str(send(client, ns, kind, user, own_token(), {"job": job_id, **extra})["outcome"])

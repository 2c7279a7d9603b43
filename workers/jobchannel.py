"""The job channel: what a running job may ask of its node agent, holding no credential of the agent's.

The agent serves one Unix socket, <work dir>/run/jobs.sock (directory 0711, socket 0666). Each
attempt's environment holds DISPATCH_JOB_SOCKET (that path) and DISPATCH_JOB_CAP: HMAC-SHA256 under a
key of this agent's (<work dir>/jobchannel.key, 0600, kept across restarts) over the job id, its
epoch and its user (dispatcher.auth.identity.job_capability). A request is carried out only if its
capability verifies and that attempt runs on this node now, so a capability expires with its
attempt; the caller's uid (SO_PEERCRED) must also be the one the job runs as (or root).

One msgpack map per connection (the client then shuts its writing side), one map back:

    {"op": "checkpointed", "job": ID, "epoch": N, "cap": HEX}        -> {"ok": true}
    {"op": "submit", ..., "specs": [codec.encode_spec bytes, ...]}   -> {"ok": true, "ids": [ID, ...]}
    anything refused                                                 -> {"ok": false, "error": ONE LINE}

A follow-up submit is the job's user's: with identity on the agent sends it to the leader signed
with the attempt's capability under the lab secret (store/requests.py submit_for_job), which checks
again that the attempt runs; with identity off it writes the jobs itself. The client's side is
dispatcher/cli/jobside.py.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path

import msgpack

from dispatcher.clock import now_ms
from dispatcher.core.errors import ConfigError, DispatcherError
from dispatcher.auth.identity import job_capability
from dispatcher.auth.peer import peer_credentials
from dispatcher.store.scripts import Outcome

from .running import Stopping

log = logging.getLogger("dispatch.agent")

KEY_FILE = "jobchannel.key"


def socket_path(work_dir) -> Path:
    """Where an agent with this work directory listens for its jobs (DISPATCH_JOB_SOCKET in their
    environment): one per agent, the same across its restarts."""
    return Path(work_dir) / "run" / "jobs.sock"
MAX_REQUEST_BYTES = 8 << 20
MAX_SPECS = 1000
READ_TIMEOUT_S = 10.0
MAX_CLIENTS = 8
_UNIX_PATH_MAX = 107


def load_key(work_dir: Path) -> bytes:
    """This agent's channel key: made once (32 random bytes, 0600), read again by later agents of the
    same work dir."""
    path = Path(work_dir) / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        key = os.urandom(32)
        tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return key
    with os.fdopen(fd, "rb") as f:
        os.fchmod(f.fileno(), 0o600)
        key = f.read()
    if len(key) < 32:  # a torn or emptied file: a new key (the jobs it served are gone with their agent)
        path.unlink()
        return load_key(work_dir)
    return key


def _err(message: str) -> dict:
    return {"ok": False, "error": message.splitlines()[0] if message else "refused"}


class JobChannel:
    """The agent's side. `sup`: the node's Supervisor (workers/jobs.py): its running attempts, its
    scripts, client, namespace and verifier."""

    def __init__(self, sup):
        self.sup = sup
        self.path = socket_path(sup.work_dir)
        self.key = load_key(sup.work_dir)
        self._sock: socket.socket | None = None
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._client = None  # for submits: the leader's answer may take longer than the agent's socket timeout

    def capability(self, job_id: str, epoch: int, user: str) -> str:
        return job_capability(self.key, job_id, epoch, user)

    # -- serving ---------------------------------------------------------------------------------
    def start(self) -> None:
        if len(str(self.path)) > _UNIX_PATH_MAX:
            raise ConfigError(f"--work-dir: the job socket {self.path} is over {_UNIX_PATH_MAX} characters; "
                              f"give a shorter --work-dir", key="--work-dir")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.parent.chmod(0o711)
        self.path.unlink(missing_ok=True)  # an earlier agent's (the work dir is locked: none runs)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o666)  # anyone may connect; only a capability is listened to
        sock.listen(64)
        self._sock = sock
        if self.sup.run_as_user:
            self._warn_if_unreachable()
        threading.Thread(target=self._serve, name="job-channel", daemon=True).start()

    def _warn_if_unreachable(self) -> None:
        for d in [self.path.parent, *self.path.parent.parents]:
            try:
                if not os.stat(d).st_mode & stat.S_IXOTH:
                    log.warning("jobs run as their users cannot reach the job socket %s nor their checkpoint "
                                "directories: %s is not searchable by others (chmod o+x %s, or give a --work-dir "
                                "they can reach)", self.path, d, d)
                    return
            except OSError:
                return

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() that waits on it
            except OSError:
                pass
            sock.close()
            self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        sock = self._sock
        while sock is not None and self._sock is sock:
            try:
                conn, _ = sock.accept()
            except OSError:  # closed: the agent stops
                return
            if not self._slots.acquire(blocking=False):
                self._reply(conn, _err("the node agent is busy with other jobs' requests; try again"))
                continue
            threading.Thread(target=self._handle, args=(conn,), name="job-request", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            uid = peer_credentials(conn)[1]
            deadline = time.monotonic() + READ_TIMEOUT_S  # for the whole request: a slow caller holds no slot long
            data = bytearray()
            while len(data) <= MAX_REQUEST_BYTES:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                reply = _err(f"request over {MAX_REQUEST_BYTES >> 20} MiB")
            else:
                try:
                    request = msgpack.unpackb(bytes(data), raw=False)
                except Exception:
                    request = None
                reply = self.answer(request, uid)
        except Exception as e:  # a hostile or broken caller never stops the agent
            reply = _err(f"malformed request ({type(e).__name__})")
        finally:
            self._slots.release()
        self._reply(conn, reply)

    @staticmethod
    def _reply(conn: socket.socket, reply: dict) -> None:
        try:
            conn.sendall(msgpack.packb(reply))
        except OSError:
            pass
        finally:
            conn.close()

    # -- answering -------------------------------------------------------------------------------
    def answer(self, req, peer_uid: int) -> dict:
        """Carry out one request from a job (or refuse it); the reply."""
        if not isinstance(req, dict):
            return _err("malformed request: not a msgpack map")
        op, job_id, epoch, cap = req.get("op"), req.get("job"), req.get("epoch"), req.get("cap")
        if op not in ("checkpointed", "submit"):
            return _err(f"unknown request {op!r}: a job may ask for checkpointed or submit")
        if type(job_id) is not str or type(epoch) is not int or type(cap) is not str:
            return _err("malformed request: job, epoch and cap are needed")
        sup = self.sup
        with sup.lock:
            run = sup.running.get(job_id)
        if (run is None or run.epoch != epoch or run.stopping in (Stopping.STALE, Stopping.FENCED)
                or run.proc.poll() is not None):
            return self._refused(f"job {job_id} attempt {epoch} does not run on node {sup.node}; its capability "
                                 f"has expired", job_id)
        user = run.spec.user
        if not hmac.compare_digest(self.capability(job_id, epoch, user), cap):
            return self._refused(f"the capability is not job {job_id}'s attempt {epoch}'s", job_id)
        if peer_uid not in (0, self._uid_of(user)):
            return self._refused(f"the caller (uid {peer_uid}) is not job {job_id}'s user {user}", job_id)
        try:
            if op == "checkpointed":
                return self._checkpointed(job_id, epoch)
            return self._submit(job_id, epoch, user, req.get("specs"), req.get("hold") is True)
        except DispatcherError as e:
            return _err(str(e))
        except Exception as e:  # Redis away, or worse: the job hears it, the agent goes on
            return _err(f"node {sup.node} could not do it now: {type(e).__name__}: {str(e).split(' : <')[0]}")

    def _refused(self, why: str, job_id: str) -> dict:
        log.warning("job channel: request for job %s refused: %s", job_id, why)
        return _err(why)

    def _uid_of(self, user: str) -> int:
        if not self.sup.run_as_user:
            return os.geteuid()
        import pwd

        try:
            return pwd.getpwnam(user).pw_uid
        except KeyError:
            return -1

    def _checkpointed(self, job_id: str, epoch: int) -> dict:
        if self.sup.scripts.checkpointed(job_id, epoch, now_ms()) != Outcome.DONE:
            return _err(f"job {job_id} is not running at epoch {epoch}; checkpoint not recorded")
        return {"ok": True}

    def _submit(self, job_id: str, epoch: int, user: str, raw_specs, held: bool) -> dict:
        from dispatcher.store.codec import decode_spec
        from dispatcher.store.connect import clone
        from dispatcher.store.jobs import write_jobs
        from dispatcher.store.requests import identity_on, submit_for_job

        if (not isinstance(raw_specs, list) or not 0 < len(raw_specs) <= MAX_SPECS
                or not all(isinstance(s, bytes) for s in raw_specs)):
            return _err(f"malformed submit: 1 to {MAX_SPECS} encoded specs are needed")
        now = int(time.time() * 1000)
        specs = []
        for n, raw in enumerate(raw_specs):
            spec = decode_spec(raw, key=f"follow-up spec {n}")
            if spec.user != user:
                return _err(f"job {job_id} runs for {user}: the jobs it submits are {user}'s too, not {spec.user}'s")
            specs.append(spec.filled(submit_ms=now))  # the agent's clock, not the job's word
        sup = self.sup
        if self._client is None:
            self._client = clone(sup.client, socket_timeout=30.0)
        if sup.verifier is not None:
            cap = job_capability(sup.verifier.secret, job_id, epoch, user)
            ids = submit_for_job(self._client, sup.ns, specs, job_id, epoch, cap, held)
        elif identity_on(self._client, sup.ns):
            return _err(f"this cluster has identity on but node {sup.node}'s agent has no --secret-file; "
                        f"its jobs cannot submit")
        else:
            ids = write_jobs(self._client, sup.ns, specs, held_by=user if held else "")
        log.info("job %s (attempt %d) submitted jobs %s for %s", job_id, epoch, ", ".join(ids), user)
        return {"ok": True, "ids": list(ids)}

"""Per-user identity: HMAC-signed requests, checked by the scheduler and the node agents.

Off by default: then a job's user is whatever the submitter says ($USER), as in RQ.
A lab turns it on by starting its scheduler (and node agents) with a secret file,
like Slurm's munge key (docs/security.md):

- Each user's token is HMAC-SHA256(secret, user). The admin hands it out
  (`dispatch auth token USER --secret-file F`); the user keeps it in
  $DISPATCH_TOKEN or ~/.config/dispatch/token. Nobody stores a token table.
- While identity is on, `<ns>:auth` says so, and clients send submit, cancel and
  preempt as signed requests (store/requests.py); the scheduler checks the
  signature and the time, lets only the owner or an admin cancel or preempt, and
  writes the job itself with its signature; agents check that signature again
  before they start the job.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from ..core.errors import ConfigError, DispatcherError, EXIT_USAGE

#: A request signed longer ago than this (or this far in the future) is refused: it bounds replays.
MAX_SKEW_S = 300.0


class NotAllowed(DispatcherError):
    exit_code = EXIT_USAGE


def load_secret(path, flag: str = "--secret-file") -> bytes:
    """A secret file (the lab secret, a dashboard's key): readable by its owner only, at least 16 bytes."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        data = p.read_bytes().strip()
    except OSError as e:
        raise ConfigError(f"{flag}: cannot read {p}: {e.strerror}", key=flag) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{flag}: {p} is readable by others; chmod 600 {p}", key=flag)
    if len(data) < 16:
        raise ConfigError(f"{flag}: {p} holds under 16 bytes; make one with: "
                          f"head -c 32 /dev/urandom | base64 > {p}", key=flag)
    return data


def token_for(secret: bytes, user: str) -> str:
    return hmac.new(secret, b"dispatch-user:" + user.encode(), hashlib.sha256).hexdigest()


#: Under identity, a notebook job's spec carries this nonce, not its JupyterLab token: every user may
#: read every job's environment (docs/security.md), and the token opens a server that runs code as its
#: owner. The owner's client and the node agent (which holds the lab secret) each derive the token.
NOTEBOOK_NONCE = "DISPATCH_NOTEBOOK_NONCE"


def notebook_token(user_token: str, nonce: str) -> str:
    """The JupyterLab token of a notebook job under identity: known to its owner and the agents only."""
    return hmac.new(user_token.encode(), b"dispatch-notebook:" + nonce.encode(), hashlib.sha256).hexdigest()[:48]


def sign(token: str, *parts) -> str:
    """HMAC-SHA256 over the parts (bytes or str), each length-prefixed so that no two splits collide."""
    mac = hmac.new(token.encode(), digestmod=hashlib.sha256)
    for part in parts:
        b = part if isinstance(part, (bytes, bytearray)) else str(part).encode()
        mac.update(len(b).to_bytes(8, "big") + b)
    return mac.hexdigest()


def verify(secret: bytes, user: str, signature: str, *parts) -> bool:
    return hmac.compare_digest(sign(token_for(secret, user), *parts), signature or "")


def current_user() -> str:
    """Who is asking: the user named with the token in use when a file gave both (`dispatch login`'s,
    or the owner's that `dispatch up` wrote), else $DISPATCH_USER, else $USER, else the login name."""
    import getpass

    issued = _token_in_use()[1]
    return issued or os.environ.get("DISPATCH_USER") or os.environ.get("USER") or getpass.getuser()


def caller_dir() -> str:
    """The directory the caller submits from (a job's default --cwd); '' if it was deleted under it
    (core/fields.with_caller then takes only an absolute --cwd)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return ""


def client_token() -> str | None:
    """This user's token: $DISPATCH_TOKEN; else, for the server the URL comes from, the login file's
    (`dispatch login`) or the token `dispatch up` wrote for its owner in the state directory; else
    ~/.config/dispatch/token (XDG_CONFIG_HOME); else the state directory's for another URL."""
    return _token_in_use()[0]


def _token_in_use() -> tuple[str | None, str | None]:
    """(token, the user it was issued to when a file says so)."""
    if os.environ.get("DISPATCH_TOKEN"):
        return os.environ["DISPATCH_TOKEN"].strip(), None
    from ..config import config_dir, saved_identity, url_source

    saved = saved_identity()
    if saved is not None and url_source() in ("record", "login"):
        return saved[1], saved[0]
    try:
        token = (config_dir() / "token").read_text().strip()
    except OSError:
        token = ""
    if token:
        return token, None
    return (saved[1], saved[0]) if saved is not None else (None, None)


class Verifier:
    """What the scheduler and agents hold while identity is on: the secret and the admins."""

    def __init__(self, secret: bytes, admins=()):
        self.secret, self.admins = secret, frozenset(admins)

    def request_ok(self, user: str, signature: str, *parts) -> bool:
        return verify(self.secret, user, signature, *parts)

    @staticmethod
    def request_ok_with(key: str, signature: str, *parts) -> bool:
        """Whether `signature` is sign(key, *parts): a request signed with a job capability, not a token."""
        return hmac.compare_digest(sign(key, *parts), signature or "")

    def may_act_on(self, user: str, owner: str) -> bool:
        return user == owner or user in self.admins

    def seal_ok(self, user: str, job_id: str, spec_bytes: bytes, seal: str) -> bool:
        """Whether `seal` is the leader's seal of this spec under this job id (seal_job)."""
        return hmac.compare_digest(seal_job(self.secret, user, job_id, spec_bytes), seal or "")


def seal_job(secret: bytes, user: str, job_id: str, spec_bytes: bytes) -> str:
    """What the leader stores with a job it wrote for `user` after checking their signed request: an
    HMAC over the job id and the spec, so a copy of the spec under another job id is refused by the
    nodes (the user's own signature covers the spec and a nonce, not the id the leader gave it)."""
    return sign(token_for(secret, user), b"job", job_id, spec_bytes)


def seal_attempt(secret: bytes, job_id: str, epoch, node: str) -> str:
    """What the leader sends with each placement (the RQ launch's third argument): the node checks it
    before it starts the attempt, so that only the leader can have a job run (again), on that node."""
    return hmac.new(secret, b"dispatch-attempt:" + f"{job_id}:{epoch}:{node}".encode(), hashlib.sha256).hexdigest()


def job_capability(secret: bytes, job_id: str, epoch, user: str) -> str:
    """What a running attempt may show instead of a token (dispatch submit from inside a job): scoped
    to the job, its attempt (epoch) and its user; the leader also checks the attempt still runs."""
    return hmac.new(secret, b"dispatch-job:" + f"{job_id}:{epoch}:{user}".encode(), hashlib.sha256).hexdigest()

"""What a locked `dispatch up` keeps in its state directory, and what it hands its parts.

With its embedded server, `up` is locked by default. The state directory is 0700 and holds
(every file 0600, written so from its first byte):

    server.json   the running `up`'s record; its URL carries the admin password (config.record_server)
    up.lock       the lock `up` holds for its life, and its record, the URL masked (up/lock.py)
    secrets.json  the server's passwords, one for "admin" and one per role (store/roles.py ROLES);
                  made once and kept, so that URLs and logins outlive a restart of `up`
    users.acl     the server's ACL file (its `aclfile`), written from secrets.json at every start:
                  no password is ever on a command line, which `ps` shows to every user
    secret        the lab secret (identity: 32 random bytes, base64), unless --secret-file names one
    token         {"user": OWNER, "token": ...}: the owner's token, which the owner's commands use

The scheduler logs in as the leader role, the node agent as the agent role, the owner's commands
with the admin URL of server.json, and the users of `up --shared` as the user role (auth/peer.py).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
from pathlib import Path

from ..config import write_private
from ..auth.identity import load_secret, token_for
from ..store import roles

SECRETS, ACL, LAB_SECRET, TOKEN = "secrets.json", "users.acl", "secret", "token"


def owner_name() -> str:
    """The Unix user `up` runs as (whose jobs it runs, and who is its admin)."""
    return pwd.getpwuid(os.getuid()).pw_name


def _private_read(path: Path) -> bytes | None:
    """A file only its owner may read (narrowed to 0600 if it was wider); None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        return f.read()


class Secure:
    """The locked files of one state directory (see the module docstring), made or read by prepare()."""

    def __init__(self, state_dir: Path, ns: str, secret_file: str | None = None):
        self.dir, self.ns = Path(state_dir), ns
        self.secret_file = Path(secret_file) if secret_file else self.dir / LAB_SECRET
        self.owner = owner_name()
        self.passwords: dict[str, str] = {}
        self.secret = b""

    @property
    def acl_path(self) -> Path:
        return self.dir / ACL

    def prepare(self, embedded: bool) -> "Secure":
        """The lab secret and the owner's token; with the embedded server also its passwords and
        ACL file."""
        if embedded:
            self.passwords = self._passwords()
            write_private(self.acl_path, roles.acl_file(self.ns, self.passwords))
        if self.secret_file == self.dir / LAB_SECRET and _private_read(self.secret_file) is None:
            write_private(self.secret_file, base64.b64encode(secrets.token_bytes(32)) + b"\n")
        self.secret = load_secret(self.secret_file)
        write_private(self.dir / TOKEN, json.dumps({"user": self.owner, "token": token_for(self.secret, self.owner)}))
        return self

    def _passwords(self) -> dict[str, str]:
        raw = _private_read(self.dir / SECRETS)
        try:
            kept = json.loads(raw) if raw else {}
        except ValueError:
            kept = {}
        kept = {k: v for k, v in kept.items() if isinstance(v, str) and v} if isinstance(kept, dict) else {}
        want = ("admin", *roles.ROLES)
        if any(name not in kept for name in want):
            kept.update({name: secrets.token_urlsafe(24) for name in want if name not in kept})
            write_private(self.dir / SECRETS, json.dumps(kept))
        return kept

    def url_for(self, admin_url: str, role: str) -> str:
        """The URL logged in as `role` (leader, agent, user); the admin URL for an external server (no
        role passwords of ours)."""
        if role not in self.passwords:
            return admin_url
        return roles.role_url(admin_url, self.ns, role, self.passwords[role])

    def identity_flags(self, admins: list[str]) -> list[str]:
        """--secret-file and --admins for the scheduler and the agent."""
        return ["--secret-file", str(self.secret_file.resolve()), "--admins", ",".join(admins)]

    def publish(self, admin_url: str, admins: list[str]) -> None:
        """Say in the server that identity is on (`<ns>:auth`, as the leading scheduler does), before
        any command may connect: a submit sent before the scheduler leads is then signed too, not
        written as is and refused by the node."""
        from ..auth.identity import Verifier
        from ..store.connect import connect
        from ..store.requests import RequestServer

        client = connect(admin_url)
        try:
            RequestServer(client, self.ns, Verifier(self.secret, admins), None).publish_mode()
        finally:
            client.close()

    def issue(self, uid: int, admin_url: str) -> dict:
        """What the login socket answers the user with `uid` (LookupError: no such user here)."""
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            raise LookupError(f"uid {uid} has no user name on this host") from None
        return {"user": name, "token": token_for(self.secret, name), "url": self.url_for(admin_url, "user"),
                "namespace": self.ns, "owner": self.owner}


def lab_secret_file() -> Path:
    """The lab secret a locked `dispatch up` made in this state directory (ConfigError if none)."""
    from ..config import state_dir
    from ..core.errors import ConfigError

    path = state_dir() / LAB_SECRET
    if not path.exists():
        raise ConfigError(f"--secret-file: no lab secret at {path} (a `dispatch up` makes one there); "
                          "give the lab's with --secret-file FILE", key="--secret-file")
    return path


def login_socket(shared: bool, given: str | None, url_flag: str | None) -> Path | None:
    """The login socket of `up --shared` (None when not shared); refuses what cannot work."""
    from ..core.errors import ConfigError
    from ..auth.login import default_socket

    if not shared:
        if given:
            raise ConfigError("--socket: only with --shared", key="--socket")
        return None
    if url_flag:
        raise ConfigError("--shared: dispatch manages the users of its own embedded server only; drop --redis "
                          "(and DISPATCH_REDIS_URL), or give your users Redis logins of their own (docs/security.md)",
                          key="--shared")
    return Path(os.path.abspath(given)) if given else default_socket(owner_name())


def agent_options(opts: dict, *, embedded: bool, socket_path: Path | None, node: str) -> None:
    """Who the agent of a locked `up` run as root runs jobs as. Alone, the owner's jobs as root
    (--allow-root-jobs: only the owner has a token). Shared, each job as its user (--run-as-user;
    root's jobs only if --allow-root-jobs was given), with a work dir outside the owner's private
    state directory so that a job can reach its checkpoint directory."""
    if not embedded or os.geteuid() != 0:
        return
    if socket_path is None:
        opts["allow_root_jobs"] = True
        return
    opts["run_as_user"] = True
    opts["work_dir"] = opts["work_dir"] or str(socket_path.parent / "nodes" / node)

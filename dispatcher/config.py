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
    def fence_s(self) -> float:
        """A node agent that could not heartbeat for this long kills its jobs itself (they are about
        to be rerun elsewhere): well inside node_timeout_s, so two copies never run at once."""
        return max(self.heartbeat_s * 2, self.node_timeout_s * 0.6)

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

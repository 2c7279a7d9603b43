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
    #: How often a node agent heartbeats, and checks its jobs for cancel/fencing.
    heartbeat_s: float = 1.0
    #: A node whose heartbeat is older than this is not offered new work.
    node_timeout_s: float = 10.0
    #: The scheduler runs a cycle at least this often, events or not.
    tick_s: float = 1.0

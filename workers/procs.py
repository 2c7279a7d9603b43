"""Reading this host's processes from /proc (Linux): their environments and names."""

from __future__ import annotations

import os
from pathlib import Path


def environs():
    """(pid, environment as a list of b"K=V") for every process this agent may read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                yield int(entry.name), f.read().split(b"\0")
        except OSError:
            continue


def command(pid: int) -> str:
    """The process's command name, or '?' once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"

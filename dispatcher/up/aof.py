"""The embedded server's append-only files, watched by `dispatch up`: files removed under a running
server are written again from what it holds in memory (BGREWRITEAOF); a server that died while they
were gone is not started again over the empty place, which would have wiped every job and started the
ids again at 1, silently."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger("dispatch.up")


def path_id(path: Path) -> tuple[int, int] | None:
    """Which file or directory `path` names (device, inode); None if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class AofWatch:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.seen: tuple[int, int] | None = None  # the files' identity since the server's last start

    def path(self) -> Path:
        """Where the server appends: its directory (Redis 7, Valkey), or one file (Redis 6)."""
        one = self.data_dir / "appendonly.aof"
        return one if one.exists() else self.data_dir / "appendonlydir"

    def started(self, timeout_s: float = 2.0) -> None:
        """After each start of the server: what its files are now (it makes them as it starts)."""
        deadline = time.monotonic() + timeout_s
        while (seen := path_id(self.path())) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.seen = seen

    def check(self, client) -> None:
        """While the server runs: files removed (or replaced) under it are written again from its memory."""
        if self.seen is None or path_id(self.path()) == self.seen:
            return
        log.warning("the server's append-only files in %s were removed while it ran; writing them again from "
                    "what it holds (BGREWRITEAOF)", self.data_dir)
        client.bgrewriteaof()
        self.started(timeout_s=10.0)

    def lost(self) -> bool:
        """Before a restart: the files the server had are gone, and what it held with them."""
        return self.seen is not None and path_id(self.path()) is None

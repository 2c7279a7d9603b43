"""Stopping the long-running processes a test started (each leads its own process group)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_processes(procs: list[subprocess.Popen], timeout_s: float = 15.0) -> None:
    """SIGTERM every process group still running, then SIGKILL what has not gone after timeout_s."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

"""The long-running processes a test started (each leads its own process group): waiting on what
they do, and stopping them."""

from __future__ import annotations

import os
import signal
import subprocess
import time


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


def wait_for(predicate, timeout: float, what: str, logs):
    """predicate()'s first true value, polled every 0.1 s; past `timeout`, an AssertionError that
    names `what` and carries logs() (the processes' logs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs()}")

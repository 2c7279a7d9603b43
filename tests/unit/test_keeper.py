"""The node's keeper kills the node's jobs at its deadline even while a report to Redis hangs: a node cut
off by dropped packets has every Redis call wait for its socket timeout, and the chaos suite saw such
reports hold the kill back past the moment the scheduler reran the job elsewhere (an overlap)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.keeper import PID_DIR

ROOT = Path(__file__).resolve().parents[2]
FENCE_S = 2.0


@pytest.fixture
def blackhole():
    """A TCP port that takes connections and never answers, as a server behind dropped packets."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    s.close()


def test_the_keeper_kills_at_its_deadline_though_its_report_to_redis_hangs(tmp_path, blackhole):
    (tmp_path / PID_DIR).mkdir()
    def job(job_id: str, argv: list[str]):  # a job's process, with the marks the agent gives it
        return subprocess.Popen(argv, start_new_session=True,
                                env={**os.environ, "DISPATCH_JOB_ID": job_id, "DISPATCH_EPOCH": "1"})

    ended = job("1", ["true"])  # left unreaped: the keeper reports it
    running = job("2", ["sleep", "60"])
    time.sleep(0.3)
    (tmp_path / PID_DIR / "1").write_text(f"{ended.pid} 1")
    (tmp_path / PID_DIR / "2").write_text(f"{running.pid} 1")
    env = {**os.environ, "DISPATCH_KEEPER_URL": blackhole, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    keeper = subprocess.Popen([sys.executable, "-m", "workers.keeper", str(tmp_path), repr(FENCE_S), repr(start), "t"],
                              stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        while running.poll() is None and time.monotonic() - start < 10:
            time.sleep(0.02)
        killed_after = time.monotonic() - start
        time.sleep(1.5)  # the hung report times out (1 s) and says so
    finally:
        running.kill()
        running.wait()
        ended.wait()
        keeper.kill()
        log = keeper.communicate()[1].decode(errors="replace")
    assert "cannot record the end of job 1" in log, log  # the report was tried, and hung on the dead link
    margin = max(0.5, FENCE_S / 0.9 * 0.1)  # config.Timing.margin_s for this fence: the scheduler's slack
    assert killed_after < FENCE_S + margin, f"killed {killed_after:.2f}s after the last heartbeat\n{log}"

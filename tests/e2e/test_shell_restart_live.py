"""A `dispatch shell` session while `dispatch up` restarts its embedded server under it: the client waits for
the server, as `logs -f` does, and the terminal shows every line the session printed meanwhile (the
agent keeps what the stream could not take for its next write)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

import pytest

from .test_up_live import DISPATCH, _env, _the_server, ups  # noqa: F401 (ups: the fixture)

pytestmark = pytest.mark.slow


def test_a_session_rides_out_its_servers_restart_and_shows_every_line(ups):  # noqa: F811
    up = ups.start("up")
    ups.wait_running(up)
    master, slave = os.openpty()
    lines = "for i in $(seq 1 14); do echo t$i; sleep 0.5; done"
    client = subprocess.Popen(DISPATCH + ["shell", "--", "sh", "-c", lines], stdin=slave, stdout=slave,
                              stderr=slave, env=_env(ups.home), start_new_session=True)
    ups.procs.append(client)
    os.close(slave)
    seen, killed, deadline = b"", False, time.monotonic() + 90
    while client.poll() is None and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
        if not killed and b"t2\r\n" in seen:
            os.kill(_the_server(ups.home), signal.SIGKILL)  # up restarts it on its port within a second or so
            killed = True
    assert client.wait(timeout=5) == 0, seen.decode(errors="replace") + ups.logs()
    shown = [w for w in seen.decode(errors="replace").split() if w.startswith("t")]
    assert shown == [f"t{i}" for i in range(1, 15)], seen.decode(errors="replace")

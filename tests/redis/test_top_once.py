"""`dispatch top` when its output is not a terminal (piped, redirected) or with --once: one frame,
plain text (no escape codes, no alternate screen), exit 0; with a row per GPU."""

from __future__ import annotations

import re
import subprocess
import sys

from dispatcher.clock import now_ms
from dispatcher.core.model import GpuInfo
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import write_heartbeat


def a_node_and_a_job(cli, client) -> str:
    gpus = [GpuInfo(i, "NVIDIA A100-80GB", 80.0, mem_used_gb=12.5 * i, util_pct=40.0 * i) for i in range(2)]
    write_heartbeat(client, cli.ns, "gpu-07", gpus, 8, 64.0, now_ms())
    (job,) = write_jobs(client, cli.ns, [build_spec(command=["true"], user="zoe", gpus=1, submit_ms=now_ms())])
    return job


def check_one_frame(out: str, job: str) -> None:
    assert "\x1b" not in out, repr(out[:300])
    assert out.count("dispatch top") == 1, out
    for expected in ("GPUs", "gpu-07", "A100-80GB", "40%", "12.5/80.0 GB", "free", job, "zoe"):
        assert expected in out, (expected, out)


def test_top_piped_prints_one_plain_frame_and_exits(cli, client):
    job = a_node_and_a_job(cli, client)
    p = subprocess.run(["bash", "-o", "pipefail", "-c", f"{sys.executable} -m dispatcher top | cat"],
                       env=cli.env(TERM="xterm-256color"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr, p.stderr
    check_one_frame(p.stdout, job)
    assert max(len(line) for line in p.stdout.splitlines()) <= 80  # no terminal, no COLUMNS: 80 wide


def test_top_redirected_to_a_file_prints_one_frame(cli, client, tmp_path):
    job = a_node_and_a_job(cli, client)
    out = tmp_path / "top.txt"
    with out.open("w") as f:
        p = subprocess.run([sys.executable, "-m", "dispatcher", "top", "--interval", "1s"], env=cli.env(),
                           stdout=f, stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr, p.stderr
    check_one_frame(out.read_text(), job)


def test_top_says_a_drained_node_is_drained_as_dispatch_nodes_does(cli, client):
    """QA: after `dispatch drain gpu-07`, `dispatch nodes` said drained but `dispatch top` said up: the operator
    watching top saw an idle, up node that took no job."""
    from dispatcher.store.nodes import drain
    from dispatcher.views.board import Board
    from dispatcher.views.top_screen import gather, screen
    from dispatcher.views.top_keys import ViewState

    a_node_and_a_job(cli, client)
    gpus = [GpuInfo(0, "NVIDIA A100-80GB", 80.0)]
    write_heartbeat(client, cli.ns, "gpu-08", gpus, 8, 64.0, now_ms())
    drain(client, cli.ns, "gpu-07", "driver upgrade", "root", now_ms())
    lines = [ln for ln in cli.run("top", "--once").stdout.splitlines() if ln.startswith("gpu-0")]
    assert lines[0].split()[:2] == ["gpu-07", "drained"] and lines[1].split()[:2] == ["gpu-08", "up"], lines
    frame = [ln.plain for ln in screen(gather(Board(client, cli.ns)), ViewState(), 100, 30)[0]]
    assert any(ln.startswith("gpu-07") and " drained " in ln for ln in frame), frame


def test_top_once_marks_a_stale_scheduler_as_the_page_and_why_do(cli, client):
    """QA: with the scheduler stopped 52 s, `why` said STALE and the page greyed out, but top printed the
    old summary like a live one ("52s ago", as "0s ago" reads). Past the page's threshold
    (views/fresh.py) its header says STALE."""
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store import keys

    a_node_and_a_job(cli, client)
    sched = Scheduler(client, cli.ns)
    sched.cycle()
    sched.lease.release()

    def header() -> str:
        p = subprocess.run([sys.executable, "-m", "dispatcher", "top", "--once"], env=cli.env(COLUMNS="200"),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and not p.stderr, p.stderr
        return p.stdout.splitlines()[1]

    assert header().startswith(f"scheduler {sched.lease.holder}: cycle ") and "STALE" not in header()
    client.hset(keys.scheduler_stats(cli.ns), "at_ms", now_ms() - 52_000)  # its last cycle, had it stopped then
    said = header()
    assert re.fullmatch(r"STALE \(scheduler's last cycle 5\ds ago: is it running\?\)", said), said


def test_top_once_says_how_many_pending_jobs_it_left_out(cli, client):
    # 12 rows under "Pending ... (272; ...)" and nothing more: a job missing with no hint
    a_node_and_a_job(cli, client)
    write_jobs(client, cli.ns, [build_spec(command=["true"], user="zoe", gpus=1, submit_ms=now_ms())
                                for _ in range(39)])
    out = cli.run("top", "--once").stdout
    shown = re.search(r"Pending, oldest first, as dispatch queue \((\d+);", out)
    more = re.search(r"\.\.\. (\d+) more \(dispatch queue --state pending lists them\)", out)
    assert shown and int(shown.group(1)) == 40 and more, out
    rows = out.split(shown.group(0))[1].split(more.group(0))[0]
    assert int(more.group(1)) + sum(1 for line in rows.splitlines() if re.match(r"\s*\d+ ", line)) == 40, out

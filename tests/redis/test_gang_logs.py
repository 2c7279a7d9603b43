"""`dispatch logs JOB --rank R` of a gang between attempts: the output each rank left is still there."""

from __future__ import annotations

from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import write_jobs
from dispatcher.store.logs import append_log


def test_a_requeued_auto_gangs_rank_logs_can_still_be_read(cli, client):
    """QA: a job larger than any node (`--gpus 4` on 2-GPU nodes: a gang of whole nodes, `--nodes` not given)
    lost an attempt or was preempted and waits again; `dispatch logs J --rank 1` said "job J has no rank 1",
    so the output of the rank that failed could not be read until the job ran again."""
    (job,) = write_jobs(client, cli.ns, [build_spec(command=["train"], user="ann", gpus=4, submit_ms=now_ms())])
    append_log(client, cli.ns, job, b"rank 0 was here\n")
    append_log(client, cli.ns, job, b"rank 1 failed: out of memory\n", rank=1)
    assert cli.run("logs", job, "--rank", "1").stdout == "rank 1 failed: out of memory\n"
    assert cli.run("logs", job, "--rank", "1", "-n", "1").stdout == "rank 1 failed: out of memory\n"
    p = cli.run("logs", job, "--rank", "2", check=False)
    assert p.returncode == 2 and p.stderr.strip() == f"dispatch: error: --rank 2: job {job} has no rank 2", p.stderr

"""What `queue` says of a job beyond its state, as squeue users read it: WAIT is submit to the first
start (report's wait) for a job run again, and a running job in its cancel's grace says so (Slurm's CG)."""

from __future__ import annotations

import time

import pytest


def row(cli, job: str) -> list[str]:
    """The job's queue line, split on runs of two spaces or more (its columns)."""
    import re

    line = cli.run("queue", "-t", "all", job).stdout.splitlines()[1]
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.slow
def test_a_requeued_job_waits_submit_to_first_start_and_a_cancel_in_its_grace_is_shown_and_not_sent_again(cli, client):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    done = cli.submit("--gpus", "0", "--", "true")
    assert cli.run("wait", done, "--timeout", "30").returncode == 0
    time.sleep(3)  # was: WAIT counted from submit to the latest start, 3s and more
    cli.run("requeue", done)
    assert cli.run("wait", done, "--timeout", "30").returncode == 0
    assert row(cli, done)[7:9] == ["0s", "0s"], row(cli, done)  # TIME: its last attempt's run (sacct's Elapsed)

    stubborn = cli.submit("--gpus", "0", "--grace", "30s", "--", "sh", "-c", "trap '' TERM; while true; do sleep 1; done")
    cli.wait_for(lambda: cli.show(stubborn)["state"] == "running", what="the job to run")
    assert cli.run("cancel", stubborn).stdout == f"{stubborn}: cancel sent to its node\n"
    assert row(cli, stubborn)[8].endswith("s"), "TIME: how long it has run"
    reason = row(cli, stubborn)[9]
    assert reason.startswith("cancelling (sent at ") and reason.endswith(", grace 30s)"), reason
    again = cli.run("cancel", stubborn)
    assert again.stdout == f"{stubborn}: already being cancelled ({reason[len('cancelling ('):]}\n", again.stdout
    from dispatcher.views.board import Board

    page = Board(client, cli.ns).job(stubborn)  # the dashboard's job page: its timeline says so too
    assert [e["what"] for e in page["timeline"]][-1] == "cancel sent to its node (grace 30s)", page["timeline"]
    forced = cli.run("preempt", "--force", stubborn)  # kill it now rather than at the end of its grace
    assert forced.stdout == (f"{stubborn}: forced preemption sent to its node; it is being cancelled "
                             f"({reason[len('cancelling ('):-1]}): it ends cancelled, not requeued\n"), forced.stdout
    cli.wait_for(lambda: cli.show(stubborn)["state"] == "cancelled", timeout=15, what="the job to end cancelled")


def test_queue_prints_the_columns_a_script_asks_for_without_a_header(cli):
    """squeue -h -O jobid,state: `dispatch queue -o id,state --noheader` prints rows alone, ready for a
    shell loop; the line saying how many more there are goes to stderr; an unknown column is one error line."""
    first, second, third = (cli.submit("--name", f"s{i}", "--", "true") for i in range(3))
    both = cli.run("queue", "-o", "ID,name", "--limit", "2")
    assert both.stdout.splitlines()[0].split() == ["ID", "NAME"]
    p = cli.run("queue", "--format", "id,state", "--noheader", "--limit", "2")
    assert [line.split() for line in p.stdout.splitlines()] == [[first, "pending"], [second, "pending"]], p.stdout
    assert p.stderr.startswith("... and 1 more pending jobs (the oldest 2 are listed") and \
        len(p.stderr.splitlines()) == 1, p.stderr
    assert cli.run("queue", "-o", "state,id", "--noheader", "-u", "nobody-here").stdout == ""
    bad = cli.run("queue", "-o", "id,colour", check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert "no column 'colour'; the columns are id,name,user" in bad.stderr, bad.stderr
    assert cli.run("queue", "-o", " , ", check=False).returncode == 2
    assert [line.split()[0] for line in cli.run("queue", "--noheader").stdout.splitlines()] == [first, second, third]

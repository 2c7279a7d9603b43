"""cancel, hold, release and update on several jobs, as scancel and scontrol users expect: each job that
exists is acted on, each id that names none is one error line, a filter is the list of the jobs it
matches, and an array's elements are named 12_5 in every line, hint and message."""

from __future__ import annotations

import json

import pytest


def queued(cli, job: str) -> dict[int, dict]:
    """An array's elements by index, as `queue --json` shows them."""
    return {j["array_index"]: j for j in json.loads(cli.run("queue", job, "--json", "--all").stdout)}


def test_unknown_ids_in_a_list_or_range_are_one_line_each_and_the_jobs_that_exist_are_acted_on(cli):
    a = int(cli.submit("--array", "0-3", "--gpus", "1", "--", "sleep", "60"))  # no node: all pending

    p = cli.run("cancel", f"{a}_1", f"{a}_99", check=False)
    assert (p.returncode, p.stdout) == (4, f"{a}_1: cancelled\n"), p
    assert p.stderr == f"dispatch: error: no job with id '{a}_99' (see `dispatch queue` for the jobs that exist)\n"

    p = cli.run("hold", f"{a + 2}-{a + 50}", check=False)  # a range past the newest job
    assert (p.returncode, p.stdout.splitlines()) == (4, [f"{a}_2: held", f"{a}_3: held"]), p
    assert p.stderr.splitlines() == [f"dispatch: error: no jobs with ids {a + 4} to {a + 50} "
                                     "(see `dispatch queue` for the jobs that exist)"]

    p = cli.run("release", str(a + 2), "999", "997", check=False)
    assert (p.returncode, p.stdout) == (4, f"{a}_2: released\n"), p
    assert ["999" in line or "997" in line for line in p.stderr.splitlines()] == [True, True], p.stderr

    p = cli.run("cancel", "900-950", check=False)  # none exists: nothing to act on
    assert (p.returncode, p.stdout, len(p.stderr.splitlines())) == (4, "", 1), p

    p = cli.run("cancel", str(a), "abc", check=False)  # not an id at all: refused before anything is done
    assert (p.returncode, p.stdout) == (4, ""), p
    assert "'abc'" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    now = queued(cli, str(a))
    assert {i: j["state"] for i, j in now.items()} == {0: "pending", 1: "cancelled", 2: "pending", 3: "pending"}
    assert now[3]["hold"] and not now[2]["hold"], "element 3 stayed held, 2 was released"


def test_queue_and_wait_show_and_wait_for_the_jobs_that_exist_and_name_each_missing_id(cli):
    a = cli.submit("--gpus", "0", "--name", "there", "--", "true")  # no node: it stays pending

    p = cli.run("queue", a, "999", check=False)  # as squeue -j: the jobs found, then one line per id not found
    assert p.returncode == 4 and [line.split()[0] for line in p.stdout.splitlines()] == ["ID", a], p
    assert p.stderr == "dispatch: error: no job with id '999' (see `dispatch queue` for the jobs that exist)\n"
    p = cli.run("queue", a, "998", "--json", check=False)
    assert p.returncode == 4 and [j["id"] for j in json.loads(p.stdout)] == [a] and "998" in p.stderr, p

    p = cli.run("wait", a, "999", "--timeout", "1", check=False)  # the missing id said first; the rest waited for
    assert p.returncode == 5 and p.stderr.splitlines()[0].endswith("no job with id '999' (see `dispatch queue` for "
                                                                   "the jobs that exist)"), p
    assert f"job {a} (pending)" in p.stderr, p.stderr
    cli.run("cancel", a)
    p = cli.run("wait", "999", check=False)  # nothing to wait for: not found, not "no job matches" and exit 0
    assert (p.returncode, len(p.stderr.splitlines())) == (4, 1) and "'999'" in p.stderr, p


@pytest.mark.slow
def test_an_arrays_elements_are_named_by_index_in_refusals_hints_wait_and_history(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    a = cli.submit("--array", "0-2%1", "--gpus", "1", "--name", "arr", "--", "sleep", "60")
    cli.wait_for(lambda: queued(cli, a)[0]["state"] == "running", what="element 0 to run")
    cli.run("cancel", f"{a}_1")

    p = cli.run("hold", a, check=False)
    assert (p.returncode, p.stdout) == (1, f"{a}_2: held\n"), p
    assert [line.split(";")[0] for line in p.stderr.splitlines()] == [
        f"dispatch: error: job {a}_0 is running", f"dispatch: error: job {a}_1 is cancelled"], p.stderr
    assert queued(cli, a)[2]["reason"].endswith(f"(dispatch release {a}_2)")

    p = cli.run("wait", a, "--timeout", "1", check=False)
    assert p.returncode == 5 and f"jobs {a}_0 (running), {a}_2 (pending)" in p.stderr, p.stderr

    cli.run("cancel", a)
    cli.wait_for(lambda: queued(cli, a)[0]["state"] == "cancelled", what="element 0 cancelled")
    rows = [line.split()[0] for line in cli.run("history").stdout.splitlines()[1:]]
    assert rows == [f"{a}_0", f"{a}_1", f"{a}_2"], rows  # (1 and 2 ended without starting: RAN -)
    assert [line.split(",")[0] for line in cli.run("history", "--csv").stdout.splitlines()[1:]] == [f"{a}_0"]


@pytest.mark.slow
def test_a_filter_on_hold_release_and_update_picks_the_pending_jobs_it_matches_and_an_id_is_refused(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    job = cli.submit("--name", "runonly", "--gpus", "0", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(job)["state"] == "running", what="the job to run")
    waiting = cli.submit("--name", "later", "--gpus", "1", "--after", job, "--", "true")
    assert cli.run("hold", "-u", cli.show(job)["user"]).stdout == f"{waiting}: held\n"  # the running one: not held
    assert cli.run("release", "--name", "*").stdout == f"{waiting}: released\n"
    p = cli.run("hold", "--name", "runonly", check=False)  # matches only the running job: nothing to hold
    assert (p.returncode, p.stderr) == (0, "dispatch: no job matches\n"), p
    for args, verb in ((["hold", job], "hold"), (["update", job, "--priority", "low"], "update")):
        p = cli.run(*args, check=False)  # named: refused, as a list is
        assert (p.returncode, p.stdout) == (1, ""), (args, p)
        assert p.stderr.startswith(f"dispatch: error: job {job} is running; cannot {verb} it"), (args, p.stderr)


def test_after_a_job_that_was_cancelled_is_submitted_with_a_warning(cli):
    gone = cli.submit("--gpus", "1", "--", "true")  # no node: pending, then cancelled
    cli.run("cancel", gone)
    p = cli.run("submit", "--after", gone, "--", "true")
    assert p.stdout.strip().isdigit(), "submitted all the same"
    assert p.stderr == (f"dispatch: warning: job {p.stdout.strip()} waits for job {gone}, which was cancelled: it "
                        "will fail too (--after-any waits for any end)\n"), p.stderr
    assert cli.run("submit", "--after-any", gone, "--", "true").stderr == "", "--after-any waits for any end"


def test_a_range_over_many_ended_jobs_says_so_in_one_line_not_one_each(cli):
    ids = [cli.submit("--", "true") for _ in range(5)]  # no node: pending, then cancelled
    live = cli.submit("--", "true")
    cli.run("cancel", f"{ids[0]}-{ids[-1]}")
    p = cli.run("hold", f"{ids[0]}-{live}", check=False)
    assert p.returncode == 1 and p.stdout == f"{live}: held\n", p
    assert p.stderr == f"dispatch: error: 5 of these jobs had ended already ({ids[0]}-{ids[-1]}): nothing to hold there\n"
    p = cli.run("cancel", f"{ids[0]}-{live}")
    assert p.returncode == 0 and p.stdout.splitlines() == [
        f"5 of these jobs had ended already ({ids[0]}-{ids[-1]}): nothing to cancel there", f"{live}: cancelled"], p


def test_queue_all_says_when_older_ended_jobs_are_not_looked_at(cli):
    ids = [cli.submit("--", "true") for _ in range(4)]  # no node: pending, then cancelled
    cli.run("cancel", f"{ids[0]}-{ids[-1]}")
    p = cli.run("queue", "--all", "--limit", "2", "-o", "id")
    assert p.stdout.split()[1:3] == ids[2:] and p.stdout.split()[3] == "..."  # the latest 2 (it said 2, showed 3)
    assert "... and older ended jobs: --all looks at the latest 2 jobs (--limit N; -t all lists every one" in p.stdout
    assert cli.run("queue", "-t", "all", "-o", "id", "--noheader").stdout.split() == ids
    assert "older" not in cli.run("queue", "--all", "-o", "id").stdout  # (all of them in the window)
    p = cli.run("queue", "--all", "--limit", "2", "-u", cli.show(ids[0])["user"], "-o", "id")  # a filter: it listed all 4
    assert p.stdout.split()[1:3] == ids[2:] and "--all shows the latest 2 ended jobs it matches" in p.stdout, p

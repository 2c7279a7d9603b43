"""Finding and acting on many jobs, as `squeue -u`, `scancel --name` and `tsp -w` users expect:
ids, ranges and filters on queue, cancel and wait, against a real scheduler and agent."""

from __future__ import annotations

import json


def ids(out: str) -> list[str]:
    return [j["id"] for j in json.loads(out)]


def test_queue_cancel_and_wait_pick_jobs_by_user_name_state_and_range(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    hold = cli.submit("--gpus", "1", "--user", "bob", "--name", "train", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(hold)["state"] == "running", what="bob's job to run")
    sweep = [cli.submit("--gpus", "1", "--user", "alice", "--name", f"sweep-{i}", "--", "sleep", "60")
             for i in range(3)]
    other = cli.submit("--gpus", "1", "--user", "alice", "--name", "eval", "--", "true")

    assert ids(cli.run("queue", "-u", "alice", "--json").stdout) == [*sweep, other]
    assert ids(cli.run("queue", "--name", "sweep-*", "--state", "pending", "--json").stdout) == sweep
    assert ids(cli.run("queue", "--state", "running", "--json").stdout) == [hold]
    assert ids(cli.run("queue", f"{sweep[0]}-{sweep[2]}", "--json").stdout) == sweep
    table = cli.run("queue", "-u", "bob").stdout
    assert "COMMAND" in table and "sleep 60" in table and "alice" not in table
    assert ids(cli.run("queue", "--me", "--json", DISPATCH_USER="bob").stdout) == [hold]  # squeue --me

    out = cli.run("cancel", "-u", "alice", "--name", "sweep-*").stdout
    assert out.splitlines() == [f"{j}: cancelled" for j in sweep]
    assert [cli.show(j)["state"] for j in sweep] == ["cancelled"] * 3
    again = cli.run("cancel", sweep[0]).stdout.strip()  # by id: it says the job had ended already
    assert again == f"{sweep[0]}: already cancelled", again
    assert cli.show(hold)["state"] == "running" and cli.show(other)["state"] == "pending"
    everyone = [hold, *sweep, other]  # squeue's -t all: ended jobs too
    assert sorted(ids(cli.run("queue", "-t", "all", "--json").stdout), key=int) == everyone
    assert ids(cli.run("queue", "-t", "done", "-u", "alice", "--json").stdout) == sweep

    cli.run("cancel", hold)
    done = cli.run("wait", other, "--timeout", "30")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), "nothing printed on success"


def test_wait_for_one_job_exits_with_its_own_code_and_says_why_on_stderr(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    failing = cli.submit("--name", "bad", "--", "sh", "-c", "exit 3")
    ok = cli.submit("--", "true")
    waited = cli.run("wait", failing, "--timeout", "30", check=False)
    assert waited.returncode == 3 and waited.stdout == ""
    assert waited.stderr.strip() == f"{failing}: failed (exit 3): exit code 3"
    both = cli.run("wait", failing, ok, "--timeout", "30", check=False)
    assert both.returncode == 1 and both.stderr.strip() == f"{failing}: failed (exit 3): exit code 3"
    assert cli.run("wait", "-u", "nobody-here", "--timeout", "5").returncode == 0


def test_selection_mistakes_are_one_line_and_touch_nothing(cli):
    job = cli.submit("--gpus", "1", "--", "sleep", "60")  # no worker: it stays pending
    for args, says in ((["cancel"], "which jobs?"), (["wait"], "which jobs?"),
                       (["queue", "--state", "sleeping"], "--state sleeping: not a state"),
                       (["cancel", "9-3"], "9-3: a range is LOW-HIGH"),
                       (["cancel", job, "abc"], "'abc'")):
        p = cli.run(*args, check=False)
        assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert says in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr
    assert cli.show(job)["state"] == "pending", "a refused command cancelled nothing"


def test_a_filter_reaches_past_the_oldest_thousand_and_queue_says_how_many_it_did_not_list(cli, tmp_path):
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(json.dumps({"command": ["true"], "gpus": 1, "user": "bob" if i == 1001 else "ann"}) + "\n"
                             for i in range(1002)))
    cli.run("submit", "--from", str(lines))  # no node: all 1,002 stay pending
    listed = cli.run("queue").stdout
    assert "... and 2 more pending jobs (the oldest 1000 are listed" in listed
    assert "and 999 more pending jobs" in cli.run("queue", "--limit", "3").stdout
    as_json = cli.run("queue", "--json", "--limit", "3")  # a script counting them is told too, on stderr
    assert len(json.loads(as_json.stdout)) == 3 and "and 999 more pending jobs" in as_json.stderr, as_json.stderr
    bob = json.loads(cli.run("queue", "-u", "bob", "--json").stdout)
    assert [j["user"] for j in bob] == ["bob"], "the 1,002nd job is found by its user"
    assert cli.run("cancel", "-u", "bob").stdout.strip() == f"{bob[0]['id']}: cancelled"


def test_an_array_that_queues_limit_cuts_is_shown_cut_not_as_if_it_ended_there(cli):
    first = cli.submit("--", "true")  # no node: every job stays pending
    array = cli.submit("--hold", "--array", "0-4", "--", "true")
    for args in (["--limit", "3"], ["--limit", "3", "-u", cli.show(first)["user"]]):  # read to the limit, or all
        rows = cli.run("queue", *args).stdout.splitlines()
        assert [r.split()[0] for r in rows[1:3]] == [first, f"{array}_[0-1,…]"], rows
        assert "2 held" in rows[2] and rows[-1].startswith("... and 3 more pending jobs"), rows
    whole = cli.run("queue").stdout.splitlines()
    assert whole[2].split()[0] == f"{array}_[0-4]" and "5 held" in whole[2], whole
    both = cli.run("queue", "--json", "-o", "id", check=False)
    assert both.returncode == 2 and "--json gives every field" in both.stderr and both.stdout == "", both

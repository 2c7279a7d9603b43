"""Job arrays through real processes, as `sbatch --array` users expect: one id for the sweep, every
index run once with DISPATCH_ARRAY_INDEX, %N never exceeded, one queue line, and the array's id or
ID_INDEX taken by cancel, wait, show and logs."""

from __future__ import annotations

import json


def most_at_once(lines: list[str]) -> int:
    """The most elements running at once, from their 'start|end INDEX TIME' lines."""
    events = sorted((float(t), 1 if what == "start" else -1) for what, _, t in (line.split() for line in lines))
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        running += step
        peak = max(peak, running)
    return peak


def test_an_array_of_20_capped_at_4_runs_each_index_once_and_never_more_than_4(cli, tmp_path):
    out = tmp_path / "runs.txt"
    script = (f'echo index $DISPATCH_ARRAY_INDEX of $DISPATCH_ARRAY_COUNT; echo start $DISPATCH_ARRAY_INDEX $(date +%s.%N) >> {out}; sleep 0.4; '
              f'echo end $DISPATCH_ARRAY_INDEX $(date +%s.%N) >> {out}')
    array = cli.submit("--array", "0-19%4", "--gpus", "1", "--name", "sweep", "--", "sh", "-c", script)
    assert array.isdigit() and "\n" not in array, "one id for the whole array"
    queued = cli.run("queue").stdout  # before any node runs it: the whole array pending, one line
    assert f"{array}_[0-19%4]" in queued and "20 pending" in queued and len(queued.splitlines()) == 2, queued
    cli.start("worker", "--node", "a", "--fake-gpus", "8xA100-40GB", "--cpus", "16")
    cli.start("scheduler")
    assert cli.run("wait", array, "--timeout", "90").returncode == 0
    lines = out.read_text().splitlines()
    starts = sorted(int(line.split()[1]) for line in lines if line.startswith("start"))
    assert starts == list(range(20)), "every index ran once"
    assert most_at_once(lines) <= 4
    jobs = json.loads(cli.run("queue", array, "--json", "--all").stdout)
    assert len(jobs) == 20 and {j["array_of"] for j in jobs} == {array}
    assert cli.show(f"{array}_7")["array_index"] == 7
    assert cli.run("logs", f"{array}_7").stdout == "index 7 of 20\n"


def test_cancel_takes_one_element_or_the_whole_array(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    array = cli.submit("--array", "0-4", "--gpus", "1", "--", "sleep", "60")
    assert cli.run("cancel", f"{array}_3").stdout.strip().endswith(": cancelled")
    states = {j["array_index"]: j["state"] for j in json.loads(cli.run("queue", array, "--json").stdout)}
    assert states[3] == "cancelled" and sum(s in ("pending", "assigned", "running") for s in states.values()) == 4
    cli.run("cancel", array)
    cli.wait_for(lambda: {j["state"] for j in json.loads(cli.run("queue", array, "--json").stdout)} == {"cancelled"},
                 what="every element cancelled")
    assert cli.run("wait", array, "--timeout", "10", check=False).returncode == 1


def test_a_bad_array_is_one_line_and_writes_nothing(cli):
    for spec, says in (("0-1000", "at most 1000"), ("5-2", "from low to high"), ("0-9%0", "cap")):
        p = cli.run("submit", "--array", spec, "--", "true", check=False)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert json.loads(cli.run("queue", "--all", "--json").stdout) == []
    p = cli.run("show", "99_1", check=False)
    assert p.returncode != 0 and "no job with id '99_1'" in p.stderr


def test_preempt_and_eta_take_an_elements_id_and_an_unknown_id_is_not_found(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    array = cli.submit("--array", "0-1", "--gpus", "1", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(f"{array}_0")["state"] == "running", what="element 0 to run")
    p = cli.run("preempt", f"{array}_0", "--force")
    assert p.stdout.strip() == f"{array}_0: forced preemption sent to its node"  # the id the user gave
    assert cli.run("eta", f"{array}_1").stdout.startswith("job ")
    p = cli.run("preempt", "999", check=False)
    assert (p.returncode, p.stderr.strip().splitlines()[0][:30]) == (4, "dispatch: error: no job with i"), p.stderr


def test_show_and_logs_of_an_arrays_id_tell_of_every_element_not_only_the_first(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler")
    array = cli.submit("--array", "0-2", "--", "sh", "-c", 'echo out $DISPATCH_ARRAY_INDEX; [ $DISPATCH_ARRAY_INDEX != 1 ]')
    cli.run("wait", array, "--timeout", "60", check=False)
    assert cli.show(array)["array_states"] == {"succeeded": 2, "failed": 1}
    assert "array_states: 2 succeeded, 1 failed" in cli.run("show", array).stdout.replace("  ", "")
    assert "array_states" not in cli.show(f"{array}_1")  # one element is one job
    assert cli.run("logs", array).stdout == f"==> {array}_0 <==\nout 0\n\n==> {array}_1 <==\nout 1\n\n==> {array}_2 <==\nout 2\n"
    refused = cli.run("logs", "-f", array, check=False)
    assert refused.returncode == 2 and f"dispatch logs -f {array}_0" in refused.stderr


def test_logs_of_an_array_whose_elements_have_not_all_started_says_so_for_each(cli):
    # an element not started yet (pending, held, or cancelled while pending) made `logs ARRAY` an internal error
    array = cli.submit("--array", "0-2", "--", "true")  # no node: no element starts
    cli.run("hold", f"{array}_1")
    cli.run("cancel", f"{array}_2")
    shown = cli.run("logs", array)
    assert shown.stdout == f"==> {array}_0 <==\n\n==> {array}_1 <==\n\n==> {array}_2 <==\n"
    assert shown.stderr.splitlines() == [f"[dispatch: job {array}_0 has not started yet: no output; -f waits for it]",
                                         f"[dispatch: job {array}_1 has not started yet: no output; -f waits for it]",
                                         f"[dispatch: job {array}_2 cancelled without starting: no output]"]
    one = cli.run("show", "--json", f"{array}_[1]")  # one element as queue shows it, and as cancel takes it
    assert json.loads(one.stdout)["array_index"] == 1


def test_logs_of_a_job_cancelled_before_it_started_says_it_never_ran(cli):
    job = cli.submit("--", "true")  # no node: it never starts
    cli.run("cancel", job)
    for args in (["logs", job], ["logs", "-f", job]):
        shown = cli.run(*args, check=False)
        assert shown.stdout == "" and shown.stderr.strip() == f"[dispatch: job {job} cancelled without starting: no output]"


def test_an_arrays_line_counts_its_held_elements_apart(cli):
    # `queue` said "4 pending" for an array two of whose elements were held: nothing said so
    array = cli.submit("--array", "0-3", "--gpus", "1", "--", "true")  # no node: every element waits
    cli.run("hold", f"{array}_1", f"{array}_2")
    line = next(line for line in cli.run("queue").stdout.splitlines() if line.startswith(f"{array}_["))
    assert "2 pending, 2 held" in line, line

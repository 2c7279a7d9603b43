"""`dispatch report` and `dispatch history` on a small week of real jobs: two users of two teams in four
classes; jobs that succeed, one that fails, one cancelled while it waits, one preempted by a critical job."""

import csv
import io
import json

import pytest

pytestmark = pytest.mark.slow

# Counts to 15 in steps of 0.2 s, saves its step on SIGTERM, and resumes from it (as test_preemption_live).
CHECKPOINTING = r"""
ck=$DISPATCH_CHECKPOINT_DIR/step; step=0
if [ "$DISPATCH_RESUME" = 1 ] && [ -f "$ck" ]; then step=$(cat "$ck"); fi
trap 'echo $step > "$ck"; exit 0' TERM
while [ $step -lt 15 ]; do step=$((step+1)); sleep 0.2; done
"""


@pytest.fixture
def week(cli, tmp_path):
    """Runs the week; returns each job's `dispatch show` by name."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[defaults]\nmin_run = "0s"\npreempt_cooldown = "0s"\n')
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler", "--policy", str(policy))
    ana, bo = ("--user", "ana", "--team", "vision"), ("--user", "bo", "--team", "nlp")
    jobs = {name: cli.submit(*ana, "--gpus", "1", "--checkpointable", "--grace", "10s", "--", "sh", "-c",
                             CHECKPOINTING) for name in ("ckpt1", "ckpt2")}
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in jobs.values()), what="both to run")
    jobs["crit"] = cli.submit(*bo, "--priority", "critical", "--gpus", "1", "--", "sleep", "1")
    jobs["fails"] = cli.submit(*bo, "--priority", "low", "--gpus", "1", "--", "sh", "-c", "sleep 0.5; exit 3")
    jobs["ok"] = cli.submit(*bo, "--priority", "low", "--gpus", "1", "--", "true")
    jobs["waits"] = cli.submit(*ana, "--priority", "high", "--gpus", "1", "--gpu-type", "H100", "--", "true")  # none
    cli.run("cancel", jobs["waits"])
    cli.run("wait", *jobs.values(), "--timeout", "60", check=False)
    return {name: cli.show(j) for name, j in jobs.items()}


def used_gpu_s(job):
    return sum((a["ended_at"] - a["started_at"]) * len(a["gpus"]) for a in job["attempts"] if a["started_at"])


def test_a_week_reported_by_user_class_as_csv_and_json(cli, week):
    preempted = [n for n in ("ckpt1", "ckpt2") if week[n]["preemptions"]]
    assert len(preempted) == 1 and week["fails"]["state"] == "failed" and week["waits"]["state"] == "cancelled"
    (victim,) = preempted

    users = json.loads(cli.run("report", "--json").stdout)
    rows = {r["group"]: r for r in users["groups"]}
    assert set(rows) == {"ana", "bo"} and users["by"] == "user" and users["skipped"] == 0
    counts = {u: (r["jobs"], r["succeeded"], r["failed"], r["cancelled"], r["preempted"]) for u, r in rows.items()}
    assert counts == {"ana": (3, 2, 0, 1, 1), "bo": (3, 2, 1, 0, 0)}
    for user, names in (("ana", ("ckpt1", "ckpt2", "waits")), ("bo", ("crit", "fails", "ok"))):
        measured = sum(used_gpu_s(week[n]) for n in names)
        assert rows[user]["gpu_hours"] * 3600 == pytest.approx(measured, abs=0.05)
    assert rows["ana"]["gpu_hours"] * 3600 > 2 * 15 * 0.2 - 0.5  # the sleeps: 15 steps of 0.2 s each
    assert rows["bo"]["gpu_hours"] * 3600 > 1 + 0.5
    assert rows["ana"]["lost_gpu_hours"] * 3600 == pytest.approx(week[victim]["gpu_s_lost"], abs=0.05)
    assert week[victim]["gpu_s_lost"] > 0 and rows["bo"]["lost_gpu_hours"] == 0
    waits = [week[n]["attempts"][0]["started_at"] - week[n]["submitted_at"] for n in ("crit", "fails", "ok")]
    assert rows["bo"]["wait_avg_s"] == pytest.approx(sum(waits) / 3, abs=0.1)
    assert rows["bo"]["wait_p95_s"] == pytest.approx(max(waits), abs=0.1)
    total = users["total"]
    assert total["jobs"] == 6
    assert total["gpu_hours"] == pytest.approx(sum(r["gpu_hours"] for r in rows.values()), abs=2e-6)
    for r in [*rows.values(), total]:  # idle: what the scheduler's samples of these seconds saw, if any
        assert r["idle_gpu_hours"] is None or 0 <= r["idle_gpu_hours"] <= r["gpu_hours"]

    classes = {r["group"]: r for r in json.loads(cli.run("report", "--by", "class", "--json").stdout)["groups"]}
    outcomes = {c: (r["jobs"], r["succeeded"], r["failed"], r["cancelled"], r["preempted"]) for c, r in classes.items()}
    assert outcomes == {"normal": (2, 2, 0, 0, 1), "critical": (1, 1, 0, 0, 0), "low": (2, 1, 1, 0, 0),
                        "high": (1, 0, 0, 1, 0)}
    teams = json.loads(cli.run("report", "--by", "team", "--json").stdout)["groups"]
    assert {r["group"]: r["jobs"] for r in teams} == {"vision": 3, "nlp": 3}

    table = list(csv.DictReader(io.StringIO(cli.run("report", "--csv").stdout)))
    assert [r["user"] for r in table][-1] == "TOTAL" and {r["user"] for r in table} == {"ana", "bo", "TOTAL"}
    assert {r["user"]: int(r["failed"]) for r in table} == {"ana": 0, "bo": 1, "TOTAL": 1}
    assert float(table[-1]["gpu_hours"]) == total["gpu_hours"]

    text = cli.run("report", "--by", "class").stdout
    assert text.splitlines()[0].split()[:3] == ["CLASS", "GPU-H", "JOBS"] and "TOTAL" in text
    empty = json.loads(cli.run("report", "--since", "2d", "--until", "1d", "--json").stdout)
    assert empty["groups"] == [] and empty["total"]["jobs"] == 0


def test_history_shows_state_exit_code_and_team_and_bad_input_is_one_line(cli, week):
    rows = {r["job_id"]: r for r in json.loads(cli.run("history", "--json").stdout)}
    fails, ok = rows[week["fails"]["id"]], rows[week["ok"]["id"]]
    assert (fails["state"], fails["exit_code"], fails["team"]) == ("failed", 3, "nlp")
    assert (ok["state"], ok["exit_code"], ok["user"]) == ("succeeded", 0, "bo")
    assert ok["submitted_at"] <= ok["started_at"] <= ok["finished_at"] and ok["node"], ok  # sacct's Start, End
    assert rows[week["waits"]["id"]]["ran"] is False  # it ended without running: listed, as sacct does,
    exported = cli.run("history", "--csv").stdout
    assert not any(line.startswith(f"{week['waits']['id']},") for line in exported.splitlines())  # not replayed
    assert exported.splitlines()[0].endswith(",priority,state,exit_code,team")
    assert f"{week['fails']['id']}," in exported and ",failed,3,nlp" in exported
    table = cli.run("history").stdout.splitlines()
    assert table[0].split() == ["ID", "NAME", "USER", "TEAM", "CLASS", "GPUS", "GPU", "TYPE", "RAN", "STATE", "EXIT"]
    # sacct's filters: -u, --state, --team
    picked = json.loads(cli.run("history", "-t", "failed", "--team", "nlp", "--json").stdout)
    assert [r["job_id"] for r in picked] == [week["fails"]["id"]]
    by_id = json.loads(cli.run("history", week["fails"]["id"], week["ok"]["id"], "--json").stdout)  # sacct -j
    assert sorted(r["job_id"] for r in by_id) == sorted([week["fails"]["id"], week["ok"]["id"]])
    assert [r["user"] for r in json.loads(cli.run("history", "-u", "bo", "--json").stdout)] == ["bo"] * sum(
        r["user"] == "bo" for r in rows.values())
    for bad, word in ((("report", "--since", "abc"), "--since"), (("report", "--by", "colour"), "--by"),
                      (("history", "--since", "abc"), "--since"), (("history", "-t", "done-ish"), "--state")):
        p = cli.run(*bad, check=False)
        assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and word in p.stderr, p.stderr


def test_a_report_since_a_time_still_to_come_says_so(cli):
    refused = cli.run("report", "--since", "2099-01-01", check=False)
    assert refused.returncode == 2 and refused.stderr.strip() == "dispatch: error: --since 2099-01-01 is not in the past"

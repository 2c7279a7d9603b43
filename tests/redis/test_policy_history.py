"""Applying a policy to the running scheduler, its history and the way back, against a real server:
the real Scheduler class, the real `dispatch policy ...` commands."""

from __future__ import annotations

import json
import os
import time

from dispatcher.core.model import GpuInfo
from dispatcher.scheduler.policy_source import PolicySource
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import write_heartbeat
from dispatcher.store.policies import HISTORY_KEPT, read_policy_history, write_applied

A = "[defaults]\nweights = { priority = 0.15, wait = 0.12 }\n"
B = "[defaults]\nweights = { priority = 0.15, wait = 0.3 }\npreempt_by = \"class\"\n"


def shown(cli) -> dict:
    return json.loads(cli.run("policy", "show", "--json").stdout)


def wait_weight(cli) -> float:
    return shown(cli)["settings"]["weights"]["wait"]


def files(tmp_path, **texts):
    out = {}
    for name, text in texts.items():
        out[name] = tmp_path / f"{name}.toml"
        out[name].write_text(text)
    return out


def submit(client, ns, gpus=1) -> str:
    (job_id,) = write_jobs(client, ns, [build_spec(user="alice", submit_ms=now_ms(), command=["true"], gpus=gpus)])
    return job_id


def test_apply_switches_the_running_scheduler_and_rollback_returns_to_the_one_before(client, ns, cli, tmp_path):
    f = files(tmp_path, a=A, b=B)
    sched = Scheduler(client, ns, policy=PolicySource(f["a"]))
    sched.cycle()
    assert wait_weight(cli) == 0.12
    out = cli.run("policy", "apply", str(f["b"])).stdout
    assert "profiles.default.weights.wait  0.12" in out and "0.3" in out, out
    assert "profiles.default.preempt_by" in out and "applied" in out, out
    sched.cycle()
    assert wait_weight(cli) == 0.3 and shown(cli)["settings"]["preempt_by"] == "class"
    history = json.loads(cli.run("policy", "history", "--json").stdout)
    assert [(e["in_force"], e["back"]) for e in history] == [(True, 0), (False, 1)], history
    assert history[1]["source"] == str(f["a"]) and history[0]["source"].endswith("b.toml (applied)")

    out = cli.run("policy", "rollback").stdout
    assert "profiles.default.weights.wait  0.3" in out and "0.12" in out, out
    sched.cycle()
    assert wait_weight(cli) == 0.12
    history = read_policy_history(client, ns)
    assert [e["number"] for e in history] == [3, 2, 1] and history[0]["source"].startswith("rollback to #1")
    table = cli.run("policy", "history").stdout
    assert "in force" in table.splitlines()[1] and "rollback --to 1" in table.splitlines()[2], table
    cli.run("policy", "rollback")  # again: back to the policy the first rollback left
    sched.cycle()
    assert wait_weight(cli) == 0.3


def test_apply_warns_of_what_the_live_cluster_cannot_give_and_applies_it_all_the_same(client, ns, cli, tmp_path):
    # reserve.high = 200 on a cluster of 4 GPUs: every normal and low job waited, and nothing had said so
    write_heartbeat(client, ns, "n1", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(4)], 8, 64.0, now_ms())
    f = files(tmp_path, big="[defaults]\nreserve = { high = 200 }\n[teams.a]\nguarantee_gpus = 3\n"
                            "[teams.b]\nguarantee_gpus = 3\n")
    p = cli.run("policy", "apply", str(f["big"]))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 0 and "applied" in p.stdout, p
    assert lines == ["dispatch: warning: reserve.high = 200 keeps all 4 GPUs of the cluster for high work and "
                     "above: lower classes start nothing",
                     "dispatch: warning: the team guarantees add up to 6 GPUs on a cluster of 4: the teams cannot "
                     "all hold theirs at once"], lines


def test_an_applied_policy_survives_a_restart_until_the_file_is_edited_after_it(client, ns, cli, tmp_path):
    f = files(tmp_path, a=A, b=B)
    past = time.time() - 60
    os.utime(f["a"], (past, past))
    first = Scheduler(client, ns, policy=PolicySource(f["a"]))
    first.cycle()
    cli.run("policy", "apply", str(f["b"]))
    first.cycle()
    first.lease.release()  # as `dispatch scheduler` does on SIGTERM
    again = Scheduler(client, ns, policy=PolicySource(f["a"]))
    again.cycle()
    assert wait_weight(cli) == 0.3, "the apply is newer than the file the new scheduler started with"
    f["a"].write_text(A.replace("0.12", "0.2"))
    later = time.time() + 5
    os.utime(f["a"], (later, later))
    again.cycle()
    assert wait_weight(cli) == 0.2, "a file edited after the apply is the newest change"


def test_rollback_with_no_earlier_policy_is_one_line_and_a_failure(client, ns, cli, tmp_path):
    p = cli.run("policy", "rollback", check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "no scheduler" in p.stderr, p.stderr
    Scheduler(client, ns, policy=PolicySource(files(tmp_path, a=A)["a"])).cycle()
    p = cli.run("policy", "rollback", "--to", "1", check=False)
    assert p.returncode == 4 and "no policy 1 back in the history: it holds 0" in p.stderr, p.stderr
    assert not client.exists(keys.policy_applied(ns))


def test_a_bad_file_is_refused_by_name_and_key_and_nothing_is_written(client, ns, cli, tmp_path):
    bad = files(tmp_path, bad="[defaults]\nweights = { wiat = 0.3 }\n")["bad"]
    for args in (("policy", "apply", str(bad)), ("policy", "diff", "default", str(bad))):
        p = cli.run(*args, check=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "bad.toml" in p.stderr and "defaults.weights.wiat" in p.stderr, p.stderr
    assert not client.exists(keys.policy_applied(ns))


def test_diff_compares_files_the_live_policy_and_the_defaults(client, ns, cli, tmp_path):
    f = files(tmp_path, a=A, b=B)
    assert cli.run("policy", "diff", "default", "default").stdout.strip() == "no differences"
    assert cli.run("policy", "diff", "live", "default").stdout.strip() == "no differences"  # no scheduler yet
    Scheduler(client, ns, policy=PolicySource(f["a"])).cycle()
    assert cli.run("policy", "diff", "live", str(f["a"])).stdout.strip() == "no differences"
    out = json.loads(cli.run("policy", "diff", str(f["a"]), str(f["b"]), "--json").stdout)
    assert out["differences"] == [
        {"setting": "profiles.default.weights.wait", "a": "0.12", "b": "0.3"},
        {"setting": "profiles.default.preempt_by", "a": "class+attained", "b": "class"}]
    lines = cli.run("policy", "diff", "default", "live").stdout.splitlines()
    assert lines[0].split() == ["SETTING", "default", "live"] and lines[1].split() == [
        "profiles.default.weights.wait", "0.0", "0.12"], lines


def test_a_garbage_policy_in_redis_never_stops_scheduling(client, ns, tmp_path, caplog):
    write_heartbeat(client, ns, "n1", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(4)], 8, 64.0, now_ms())
    sched = Scheduler(client, ns, policy=PolicySource(files(tmp_path, a=A)["a"]))
    sched.cycle()
    write_applied(client, ns, "weights = [not toml", "a hand edit", now_ms())  # bypasses `apply`'s check
    job = submit(client, ns)
    assert [p.job_id for p in sched.cycle().placements] == [job]
    assert "does not parse" in sched.policy.error and sched.policy.text == A
    assert "does not parse" in caplog.text
    client.delete(keys.policy_applied(ns))
    client.set(keys.policy_applied(ns), "a string, not a hash")
    job = submit(client, ns)
    assert [p.job_id for p in sched.cycle().placements] == [job]
    assert "cannot read the applied policy" in sched.policy.error
    client.delete(keys.policy_applied(ns))
    client.delete(keys.policy_history(ns))
    client.set(keys.policy_history(ns), "not a list")  # the history is lost, not the policy or the cycle
    write_applied(client, ns, B, "a good one", now_ms())
    job = submit(client, ns)
    assert [p.job_id for p in sched.cycle().placements] == [job]
    assert sched.policy.text == B and client.hget(keys.policy(ns), "text").decode() == B


def test_the_history_keeps_the_last_ten_policies_and_a_repeat_adds_none(client, ns, tmp_path):
    sched = Scheduler(client, ns, policy=PolicySource(files(tmp_path, a=A)["a"]))
    sched.cycle()
    for i in range(HISTORY_KEPT + 2):
        write_applied(client, ns, A.replace("0.12", f"0.{i + 13}"), f"apply {i}", now_ms())
        sched.cycle()
    write_applied(client, ns, A.replace("0.12", f"0.{HISTORY_KEPT + 14}"), "the same text again", now_ms())
    sched.cycle()
    history = read_policy_history(client, ns)
    assert len(history) == HISTORY_KEPT and history[0]["source"] == f"apply {HISTORY_KEPT + 1}"
    assert [e["number"] for e in history] == list(range(HISTORY_KEPT + 3, 3, -1))

"""The board's alerts: thresholds from the policy file's [alerts] table (one place, so every view
shows the same alerts), bad thresholds named, and each alert firing on what it watches."""


import pytest

from dispatcher.policy.profiles import parse_policy
from dispatcher.views.alerts import AlertConfig, evaluate
from dispatcher.views.board import Board
from dispatcher.core.errors import ConfigError
from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import write_jobs


@pytest.mark.parametrize("table,field,value", [('critical_wait = "5m"', "critical_wait_s", 300.0),
                                               ('low_util = 40\nlow_util_for = "1h"', "low_util_for_s", 3600.0),
                                               ("", "high_wait_s", 1800.0)], ids=["duration", "two", "defaults"])
def test_alert_thresholds_come_from_the_policy_files_alerts_table(table, field, value):
    assert getattr(parse_policy(f"[alerts]\n{table}\n").alerts, field) == value


@pytest.mark.parametrize("table", ["nope = 1", 'high_wait = "soon"', "low_util = -3", "low_util = 200",
                                   "low_util = nan", "critical_wait = inf"])
def test_bad_alert_thresholds_name_the_key(table):
    with pytest.raises(ConfigError) as e:
        parse_policy(f"[alerts]\n{table}\n")
    assert e.value.key == f"alerts.{table.split()[0]}"


def test_alerts_fire_on_long_waits_dead_nodes_zombies_low_allocation_and_idle_gpus():
    now = 10_000_000
    cfg = AlertConfig(critical_wait_s=60, high_wait_s=600, low_util_pct=50, low_util_for_s=300)
    view = {"classes": [{"class": "critical", "pending": 2, "oldest_wait_s": 90.0, "oldest_job": "7"},
                        {"class": "high", "pending": 1, "oldest_wait_s": 100.0, "oldest_job": "8"},
                        {"class": "low", "pending": 1, "oldest_wait_s": 9e9, "oldest_job": "9"}],
            "nodes": [{"name": "a", "alive": True, "seen_s_ago": 1, "gpus": [
                          {"index": 0, "job": "3", "blocked": None, "idle": "GPUs idle: all below 5% utilization for 30m",
                           "idle_since": now / 1000 - 2400},
                          {"index": 1, "job": None, "blocked": "zombie: pid 9"}]},
                      {"name": "b", "alive": False, "seen_s_ago": 42, "gpus": []}]}
    samples = [{"t_ms": now - s * 1000, "pending": 3, "gpus": 4, "held": 1, "idle": ["a:0"]}
               for s in range(400, -1, -20)]
    got = evaluate(view, {"critical": [90.0, 30.0], "high": [100.0]}, samples, cfg, now)
    assert [(a["kind"], a["severity"], a["subject"]) for a in got] == [
        ("dead_node", "critical", "b"), ("wait", "critical", "critical"),
        ("idle_gpu", "warning", "a:0"), ("low_util", "warning", "cluster"), ("zombie", "warning", "a:1")]
    assert "1 critical job waiting over 60s (longest: job 7, 90s)" in got[1]["message"]
    assert got[2]["message"] == "a GPU 0 held by job 3: GPUs idle: all below 5% utilization for 30m (idle for 40m)"
    # a window the samples do not reach back over raises nothing; the idle warning needs none (its agent timed it)
    assert [a["kind"] for a in evaluate(view, {}, samples[-5:], cfg, now)] == ["dead_node", "idle_gpu", "zombie"]


def test_the_old_idle_alert_threshold_points_to_the_policy():
    with pytest.raises(ConfigError) as e:
        parse_policy('[alerts]\nidle_gpu_for = "1h"\n')
    assert e.value.key == "alerts.idle_gpu_for" and "idle_warn" in str(e.value)


def test_every_view_takes_the_thresholds_the_scheduler_published(client, ns, cli):
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.scheduler.policy_source import PolicySource

    waiting = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms() - 120_000, gpus=1,
                                                 priority="critical")])[0]
    policy = cli.home / "policy.toml"
    policy.write_text('[alerts]\ncritical_wait = "1m"\n')
    Scheduler(client, ns, policy=PolicySource(str(policy))).cycle()  # publishes the policy, and its queue
    alerts = Board(client, ns).overview()["alerts"]
    assert [(a["kind"], a["subject"]) for a in alerts] == [("wait", "critical")], alerts
    assert f"job {waiting}" in alerts[0]["message"]
    out = cli.run("top", "--once", "--alerts", "critical_wait=5m", check=False)
    assert out.returncode != 0 and "policy file's [alerts] table" in out.stderr and len(out.stderr.splitlines()) == 1


def test_a_preempted_job_waits_from_its_requeue_not_its_submit_and_raises_no_wait_alert_for_its_run(client, ns, cli):
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.scheduler.policy_source import PolicySource
    from dispatcher.store.scripts import Scripts
    from tests.redis.test_store import beat

    beat(client, ns, "a", gpus=1)
    t = now_ms()
    job = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=t - 600_000, gpus=1,
                                             priority="critical", checkpointable=True)])[0]
    policy = cli.home / "policy.toml"
    policy.write_text('[alerts]\ncritical_wait = "1m"\n')
    sched = Scheduler(client, ns, policy=PolicySource(str(policy)))
    sched.cycle()  # placed at once: it waited 0 s, then ran 10 minutes (its submit is 10 minutes ago)
    scripts, epoch = Scripts(client, ns), int(client.hget(f"{ns}:job:{job}", "epoch"))
    assert scripts.mark_running(job, epoch, t - 600_000, 4242) == 1
    assert scripts.finish(job, "a", epoch, "pending", None, now_ms() - 5_000, "preempted (graceful) by operator x",
                          preempted=True, keep_wait=True, checkpointable=True) == 1  # back in its old place
    client.delete(f"{ns}:node:a:alloc")
    beat(client, ns, "a", gpus=0)  # (nothing to place it on: it stays pending)
    sched.cycle()
    view = Board(client, ns).overview()
    (crit,) = [c for c in view["classes"] if c["class"] == "critical"]
    assert crit["oldest_job"] == job and 4 <= crit["oldest_wait_s"] < 60, crit  # pending 5 s, not 10 min
    assert [a for a in view["alerts"] if a["kind"] == "wait"] == [], view["alerts"]


def test_a_scheduler_that_published_no_cycle_for_its_threshold_is_a_critical_alert_while_there_is_work():
    cfg = AlertConfig(scheduler_stale_s=120)
    busy = {"classes": [{"class": "normal", "pending": 3, "oldest_wait_s": 1.0, "oldest_job": "4"}], "nodes": [],
            "scheduler": {"at": 1.0, "age_s": 130.0, "holder": "box:77"}}
    (alert,) = evaluate(busy, {}, [], cfg, 10_000_000)
    assert (alert["kind"], alert["severity"], alert["subject"]) == ("scheduler", "critical", "scheduler")
    assert alert["message"] == "no scheduler cycle for 2m (the last by box:77): is a scheduler running?"
    assert evaluate({**busy, "scheduler": {"at": 1.0, "age_s": 30.0}}, {}, [], cfg, 10_000_000) == []
    idle = {**busy, "classes": []}  # nothing to schedule, no node: nothing wrong
    assert evaluate(idle, {}, [], cfg, 10_000_000) == []
    assert parse_policy('[alerts]\nscheduler_stale = "5m"\n').alerts.scheduler_stale_s == 300.0

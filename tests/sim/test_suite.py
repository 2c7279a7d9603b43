"""The workload suite: the generated weeks are what they say, and `dispatch simulate --suite` scores them."""

import json
import random
import subprocess
import sys
from collections import Counter

import pytest

from dispatcher.sim.generator import MIXES, WEEK, families, generate, gpu_count, offered_load
from dispatcher.sim.suite import promises, row


@pytest.mark.parametrize("mix", MIXES, ids=[m.name for m in MIXES])
def test_a_generated_week_meets_its_offered_load_with_every_kind_it_names(mix):
    jobs = generate(mix, random.Random(f"1:{mix.name}"))
    gpus = gpu_count(mix.nodes)
    load = offered_load(jobs, gpus)
    assert abs(load - mix.load) < 0.05 + 0.05 * mix.load, f"{mix.name}: offered load {load:.2f}, want {mix.load}"
    classes = Counter(j.priority for j in jobs)
    want = {"training": "normal", "interactive": "high", "critical": "critical", "sweeps": "low",
            "pretraining": "low", "rush": "normal", "evalbot": "normal"}
    for kind, _ in mix.kinds:
        assert classes[want[kind]] > 0, f"{mix.name}: no {want[kind]} jobs for its {kind} work: {classes}"
    fams = families(mix.nodes)
    assert all(set(j.gpu_types) <= set(fams) for j in jobs), "a job asks for a GPU family the cluster lacks"
    assert any(j.gpu_types for j in jobs), "no job is bound to a GPU type"
    assert all(0 <= j.submit_s < WEEK and j.duration_s > 0 for j in jobs)
    assert generate(mix, random.Random(f"1:{mix.name}")) == jobs, "the same seed gave another week"


def test_the_family_spans_seventy_to_a_hundred_and_twenty_percent_on_mixed_gpu_types():
    loads = [m.load for m in MIXES]
    assert len(MIXES) >= 6 and min(loads) <= 0.7 and max(loads) >= 1.2
    assert all(len(families(m.nodes)) >= 2 for m in MIXES)
    assert len({m.kinds for m in MIXES}) == len(MIXES), "two weeks share one mix"


def _metrics(jct, classes, big=0.0):
    return {"avg_jct_s": jct, "p99_wait_8plus_gpus_s": big, "jain_fairness": 1.0, "preemptions": 0,
            "gpu_hours_lost": 0.0, "utilization": 0.5,
            "per_class": {c: {"avg_wait_s": a, "p99_wait_s": p, "jobs": 1} for c, (a, p) in classes.items()}}


def test_a_promise_is_broken_only_by_what_it_names():
    bases = {"fifo": _metrics(100, {"low": (50, 1000)}), "fifo-easy": _metrics(90, {}, big=500),
             "las": _metrics(80, {})}
    good = row(_metrics(70, {"critical": (60, 60), "high": (300, 900), "low": (900, 1500)}, big=500), bases)
    assert all(promises(good, bases).values()), promises(good, bases)
    bad = row(_metrics(85, {"critical": (61, 61), "high": (301, 900), "low": (900, 1561)}, big=561), bases)
    assert [k for k, ok in promises(bad, bases).items() if not ok] == \
        ["jct<las", "critical<=1m", "high<=5m", "low p99<=1.5x fifo", "8+ p99<=fifo-easy"]
    assert good["vs_las"] == 0.875 and bad["vs_fifo"] == 0.85


def test_dispatch_simulate_suite_prints_one_card_and_writes_the_same_as_json(tmp_path):
    out = tmp_path / "card.json"
    got = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", "--suite", "--workloads", "pretrain,daytime",
                          "--compare", "dispatch,fifo", "--seed", "3", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr
    card = json.loads(out.read_text())
    assert list(card["workloads"]) == ["pretrain", "daytime"]
    for w in card["workloads"].values():
        assert set(w["rows"]) == {"fifo", "fifo-easy", "las", "srtf", "dispatch"}
        assert w["rows"]["fifo"]["vs_fifo"] == 1
    assert set(card["broken"]) == {"dispatch"}
    lines = got.stdout.splitlines()
    assert sum(1 for ln in lines if ln.startswith(("pretrain", "daytime"))) == 10, got.stdout
    assert any(ln.startswith("dispatch: ") for ln in lines), got.stdout


def test_a_bad_suite_request_gets_one_line():
    got = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", "--suite", "--workloads", "nosuch"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode != 0 and "Traceback" not in got.stderr
    assert got.stderr.strip().count("\n") == 0 and "nosuch" in got.stderr, got.stderr
    got = subprocess.run([sys.executable, "-m", "dispatcher", "simulate"], capture_output=True, text=True, timeout=120)
    assert got.returncode != 0 and "--suite" in got.stderr and got.stderr.strip().count("\n") == 0, got.stderr
    got = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", "--suite", "--workloads", "daytime",
                          "--export", "/proc/no/such/dir"], capture_output=True, text=True, timeout=120)
    assert got.returncode != 0 and "--export" in got.stderr and got.stderr.strip().count("\n") == 0, got.stderr


def test_the_suite_exports_its_weeks_as_traces_the_simulator_replays(tmp_path):
    got = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", "--suite", "--workloads", "pretrain",
                          "--seed", "3", "--export", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    path, _, nodes = got.stdout.strip().partition("  --nodes ")
    from dispatcher.sim.generator import mix_named
    from dispatcher.sim.workload import parse_trace

    jobs = parse_trace(open(path).read())
    assert jobs == generate(mix_named("pretrain"), random.Random("3:pretrain")) and nodes == mix_named("pretrain").nodes
    replay = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", path, "--nodes", nodes, "--json"],
                            capture_output=True, text=True, timeout=300)
    assert replay.returncode == 0 and json.loads(replay.stdout)["policies"]["dispatch"]["finished"] == len(jobs)


def test_the_suite_finds_the_shared_traces_where_the_project_keeps_them():
    from dispatcher.lab.suite_run import DEFAULT_TRACES
    from dispatcher.sim.suite import TRACES

    assert [file for _, file, _, _ in TRACES if not (DEFAULT_TRACES / file).is_file()] == []


def test_a_stalled_run_breaks_the_finishes_promise_and_is_starred_on_the_card():
    from dispatcher.sim.suite import format_card

    bases = {"fifo": _metrics(100, {}), "fifo-easy": _metrics(90, {}), "las": _metrics(80, {})}
    stalled = row(_metrics(10, {}) | {"stalled_at_s": 2.5 * 86400, "jobs": 40, "finished": 30}, bases)
    assert stalled["stalled"].startswith("stalled on day 2.5") and "10 of 40 jobs unfinished" in stalled["stalled"]
    assert [k for k, ok in promises(stalled, bases).items() if not ok] == ["finishes"]
    assert all(promises(row(_metrics(70, {}), bases), bases).values())
    card = {"workloads": {"lab": {"rows": {"srtf": stalled}}}, "broken": {}}
    text = format_card(card)
    assert "lab       srtf *" in text and "* lab srtf: stalled on day 2.5" in text, text

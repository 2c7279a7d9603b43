"""What `dispatch simulate` reports of a run in which jobs never finish: shares stay shares, a figure
with no sample is '-' (null in JSON), not a perfect-looking 0 or Jain 1, and the note under the table
tells a job no node could hold from one the policy held back. Reporting only: the policy decides the same."""

import random
from dataclasses import replace

from dispatcher.policy.config import PolicyConfig
from dispatcher.sim.compare import simulate, table
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.policies import SimPolicy, dispatch_policy, resolve
from dispatcher.sim.suite import format_card, promises, row, shortfall
from dispatcher.sim.workload import EstimateModel, TraceJob

#: Eight GPUs all kept for high work: a normal 4-GPU job that fits the node never starts.
LANE = SimPolicy("lane", replace(PolicyConfig(), reserve={"high": 8}), "a high lane of the whole node")
HIGH_THEN_NORMAL = [TraceJob("h", 0, "u", 1, 600, (), "high"), TraceJob("n", 10, "v", 4, 600, (), "normal")]


def run(trace, policies, nodes=None, gpus=8):
    return simulate(trace, make_nodes(nodes, None if nodes else gpus), policies,
                    estimates=EstimateModel.parse("oracle"), make_rng=random.Random, seed=0)


def note_of(policy: str, out: dict) -> str:
    """The line under the table about `policy`'s unfinished jobs."""
    return next(line for line in table(out).splitlines() if line.startswith(f"{policy}: "))


def test_fragmentation_stays_a_share_when_a_job_that_fits_never_starts():
    # n waits from 10 s; the run's makespan ends with h at 600 s, but ticks went on while n waited
    # (to 324,010 s): that free GPU-time was counted against a 600 s makespan (frag 540).
    m = run(HIGH_THEN_NORMAL, [LANE])["policies"]["lane"]
    assert m["makespan_s"] == 600.0
    assert m["fragmentation"] == round(7 * 590 / (8 * 600), 4)  # 7 GPUs free while n waited, 10 s to 600 s
    assert 0.0 <= m["utilization"] <= 1.0 and m["utilization"] == 0.125


def test_fragmentation_is_the_schedules_not_the_policys_ranking():
    # every policy runs a (1 GPU, 100 s) then b (2 GPUs) at 100 s: one GPU idles 99 s while b waits. Only the
    # policies that rank their verdicts were charged for it (fifo, las: 0.0), so --compare ranked them on it.
    trace = [TraceJob("a", 0, "u", 1, 100, (), "normal"), TraceJob("b", 1, "u", 2, 10, (), "normal")]
    out = run(trace, [resolve(p) for p in ("fifo", "fifo-easy", "las", "dispatch")], gpus=2)["policies"]
    assert {name: m["fragmentation"] for name, m in out.items()} == dict.fromkeys(out, round(99 / (2 * 110), 4))


def test_a_job_held_back_by_the_policy_is_not_blamed_on_the_cluster():
    out = run(HIGH_THEN_NORMAL, [LANE])
    note = note_of("lane", out)
    assert note == ("lane: 1 of 2 jobs never finished (left out of its JCT and waits), e.g. n (4 GPUs): they fit the "
                    "cluster but the policy never ran them to an end (held back, e.g. by a reserve or a quota, or no "
                    "room was freed)"), note
    assert "--gpus/--nodes" not in note


def test_the_note_counts_jobs_no_node_holds_apart_from_jobs_held_back():
    trace = HIGH_THEN_NORMAL + [TraceJob("huge", 1, "u", 16, 100, (), "normal"),
                                TraceJob("h100", 2, "u", 1, 30, ("H100",), "normal")]
    m = run(trace, [LANE])["policies"]["lane"]
    assert (m["never_fit"], m["never_fit_examples"], m["held_examples"]) == \
        (2, ["huge (16 GPUs)", "h100 (1 GPU of H100)"], ["n (4 GPUs)"])
    note = note_of("lane", run(trace, [LANE]))
    assert "3 of 4 jobs never finished" in note and "2 of them, e.g. huge (16 GPUs), h100 (1 GPU of H100): no node" \
        in note and "1 of them, e.g. n (4 GPUs): they fit the cluster" in note, note


def test_a_policy_that_finished_nothing_shows_dashes_not_the_best_figures():
    out = run([TraceJob("a", 0, "u", 1, 10, ("H100",), "normal")], [resolve("fifo"), dispatch_policy()],
              nodes="1x8xA100-80GB")
    for m in out["policies"].values():
        assert m["finished"] == 0
        for key in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_wait_s", "p99_wait_s", "p99_wait_8plus_gpus_s",
                    "makespan_s", "utilization", "fragmentation", "jain_fairness", "jct_vs_fifo"):
            assert m.get(key) is None, (key, m.get(key))
    dispatch_row = table(out).splitlines()[3]
    assert dispatch_row.split()[:8] == ["dispatch"] + ["-"] * 7 and "1.000" not in dispatch_row, dispatch_row


def test_no_job_of_8_gpus_gives_no_p99_wait_of_them():
    m = run(HIGH_THEN_NORMAL, [resolve("fifo")])["policies"]["fifo"]
    assert m["finished"] == 2 and m["p99_wait_8plus_gpus_s"] is None and m["avg_jct_s"] == 600.0


def test_compare_does_not_rank_a_policy_that_finished_nothing_as_best():
    trace = [TraceJob("n", 0, "v", 4, 600, (), "normal")]
    out = run(trace, [resolve("fifo"), LANE])
    assert out["policies"]["fifo"]["jct_vs_fifo"] == 1.0 and out["policies"]["lane"]["jct_vs_fifo"] is None
    fifo, lane = out["policies"]["fifo"], out["policies"]["lane"]
    bases = {"fifo": fifo, "fifo-easy": fifo, "las": fifo}
    card_row = row(lane, bases)
    assert "vs_fifo" not in card_row
    broken = [k for k, ok in promises(card_row, bases).items() if not ok]
    assert broken == ["jct<las", "jct<fifo-easy"], broken
    assert shortfall(card_row, bases)["jct<las"] == float("inf")
    text = format_card({"workloads": {"w": {"rows": {"lane": card_row}}}, "broken": {}})
    assert text.splitlines()[2].split()[:4] == ["w", "lane", "-", "-"], text


def test_a_baseline_with_no_job_of_8_gpus_keeps_that_promise():
    fifo = run(HIGH_THEN_NORMAL, [resolve("fifo")])["policies"]["fifo"]
    bases = {"fifo": fifo, "fifo-easy": fifo, "las": fifo}
    assert promises(row(fifo, bases), bases)["8+ p99<=fifo-easy"]

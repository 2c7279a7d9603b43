"""The quick forecast for a long queue (dispatcher/sim/list_forecast.py): list scheduling by estimates,
on hand-made snapshots whose answer is known, and against the full forecast where both apply."""

from dispatcher.policy import PolicyConfig
from dispatcher.sim.forecast import forecast, work_left
from dispatcher.sim.list_forecast import list_start
from tests.builders import NOW_MS, make_job, make_node, snapshot

CONFIG = PolicyConfig()


def start_of(snap, job_id, ahead=()):
    return list_start(snap, job_id, list(ahead), NOW_MS, work_left(snap, NOW_MS, CONFIG))


def test_a_job_that_fits_now_starts_now():
    snap = snapshot(pending=[make_job("j").gpus(1)], nodes=[make_node("n1").gpus(2)])
    s = start_of(snap, "j")
    assert (s.at_ms, s.node, s.after) == (NOW_MS, "n1", ())


def test_a_two_gpu_job_starts_when_the_gpus_it_waits_for_are_released_as_the_full_forecast_says():
    r = make_job("r").gpus(2).est(900).running_on("n1", 0, 1, started_s_ago=300)
    other = make_job("o").gpus(1).est(86400).running_on("n2", 0)
    snap = snapshot(pending=[make_job("j").gpus(2).est(60)], running=[r, other],
                    nodes=[make_node("n1").gpus(2).held(0, 1), make_node("n2").gpus(2).held(0)])
    s = start_of(snap, "j")
    assert (s.at_ms - NOW_MS, s.node, s.after) == (600_000, "n1", ("r",))
    assert s.at_ms == forecast(snap, "j", NOW_MS, CONFIG, changes=False).start.at_ms


def test_the_jobs_ranked_ahead_take_the_gpus_first_for_their_estimates():
    snap = snapshot(pending=[make_job("a").gpus(1).est(300), make_job("b").gpus(1).est(60)],
                    nodes=[make_node("n1").gpus(1)])
    assert start_of(snap, "b", ahead=["a"]).at_ms - NOW_MS == 300_000
    assert start_of(snap, "b").at_ms == NOW_MS  # ranked ahead of nothing: free now


def test_a_job_ahead_that_cannot_use_the_nodes_takes_nothing_from_it():
    snap = snapshot(pending=[make_job("v").gpus(1, "V100").est(3600), make_job("j").gpus(1, "A100").est(60)],
                    nodes=[make_node("a").gpus(1, "A100"), make_node("w").gpus(1, "V100")])
    s = start_of(snap, "j", ahead=["v"])
    assert (s.at_ms, s.node) == (NOW_MS, "a")


def test_a_job_ahead_backfills_only_where_it_does_not_delay_the_reservations_before_it():
    # n1: 2 GPUs, one held for 10 min. a (2 GPUs, ahead) starts at +10 min; b (1 GPU, 5 min, ahead)
    # backfills now on the free GPU; j (1 GPU, 1 h) cannot run before a ends: +10 min + a's hour
    r = make_job("r").gpus(1).est(600).running_on("n1", 0)
    snap = snapshot(pending=[make_job("a").gpus(2).est(3600), make_job("b").gpus(1).est(300),
                             make_job("j").gpus(1).est(3600)], running=[r], nodes=[make_node("n1").gpus(2).held(0)])
    assert start_of(snap, "b", ahead=["a"]).at_ms == NOW_MS
    assert start_of(snap, "j", ahead=["a", "b"]).at_ms - NOW_MS == (600 + 3600) * 1000


def test_a_job_larger_than_any_node_takes_whole_nodes_when_enough_are_free_together():
    r = make_job("r").gpus(2).est(1200).running_on("n2", 0, 1)
    snap = snapshot(pending=[make_job("big").gpus(4).est(60)], running=[r],
                    nodes=[make_node("n1").gpus(2), make_node("n2").gpus(2).held(0, 1)])
    s = start_of(snap, "big")
    assert (s.at_ms - NOW_MS, set(s.node.split("+")), s.after) == (1_200_000, {"n1", "n2"}, ("r",))


def test_a_job_no_node_could_ever_hold_is_not_forecast():
    snap = snapshot(pending=[make_job("j").gpus(1, "H100")], nodes=[make_node("a").gpus(1, "A100")])
    assert start_of(snap, "j").at_ms is None

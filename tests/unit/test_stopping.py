"""Why an attempt is being stopped (workers/running.py): the one table of allowed changes, and an end
recorded for every reason (workers/outcomes.py)."""

from workers.outcomes import ENDINGS
from workers.running import NEXT, Running, Stopping


def running() -> Running:
    return Running("j1", 3, proc=None, spec=None, ckpt_dir=None)


def test_only_a_running_attempt_that_nobody_stops_is_falsy():
    assert not Stopping.NO and all(s for s in Stopping if s is not Stopping.NO)
    assert not running().stopping


def test_a_running_attempt_may_be_stopped_for_any_reason_and_takes_the_command_with_it():
    for why in set(Stopping) - {Stopping.NO}:
        run = running()
        assert run.stop_as(why, {"type": "x"}) and run.stopping is why and run.command == {"type": "x"}


def test_nothing_leaves_stale_and_nothing_goes_back_to_not_stopping():
    for why in Stopping:
        run = running()
        run.stop_as(Stopping.STALE)
        assert not run.stop_as(why, {"type": "cancel"}) and run.stopping is Stopping.STALE and run.command == {}
    assert all(Stopping.NO not in NEXT[s] for s in Stopping)


def test_a_cancel_wins_over_every_reason_but_stale_and_a_requeue_over_none():
    for first in set(Stopping) - {Stopping.NO, Stopping.STALE}:
        run = running()
        run.stop_as(first)
        assert not run.stop_as(Stopping.REQUEUE)
        assert run.stop_as(Stopping.CANCEL, {"reason": "r"}) and run.stopping is Stopping.CANCEL


def test_a_fenced_copy_becomes_stale_once_its_epoch_moved_but_is_never_fenced_twice():
    run = running()
    assert run.stop_as(Stopping.FENCED) and not run.stop_as(Stopping.FENCED) and not run.stop_as(Stopping.PREEMPT)
    assert run.stop_as(Stopping.STALE)


def test_every_reason_has_an_ending_and_the_values_are_the_old_strings():
    assert set(ENDINGS) == set(Stopping) == set(NEXT)
    assert [s.value for s in Stopping] == ["", "cancel", "stale", "requeue", "preempt", "shrink", "fenced", "gang",
                                           "hung", "timeout", "idle-session"]

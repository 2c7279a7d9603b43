"""The script wrappers against a real server: a preemption and a cancel are each one step (the job
marked and its node's command queued, or neither), and finish's named arguments are the script's."""

import re

import msgpack
import pytest

from dispatcher.scheduler.loop import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import control, counters, keys, scripts
from dispatcher.store.jobs import cancel_job, read_job, write_jobs
from dispatcher.store.scripts import FinishArgs, Outcome, Scripts


def running(client, ns, s, node="n1"):
    """A job placed on `node` and started there (its agent played here); returns (id, epoch)."""
    (job_id,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=1)])
    epoch = s.commit_placement(job_id, node, (0,), 0, now_ms())
    assert s.mark_running(job_id, epoch, now_ms(), 4242) == Outcome.DONE
    return job_id, epoch


def commands(client, ns, node="n1"):
    return [msgpack.unpackb(f[control.FIELD], raw=False) for _, f in client.xrange(keys.node_control(ns, node))]


def preempt(s, job_id, epoch, **kw):
    return control.preempt(s, "n1", job_id, epoch, now_ms(), by="job 9", mode="graceful", reason="for job 9", **kw)


def test_a_preemption_marks_the_job_and_queues_its_command_in_one_step(client, ns):
    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    assert preempt(s, job_id, epoch) == Outcome.DONE
    job = read_job(client, ns, job_id)
    assert (job["state"], job["preempted_by"], job["preempt_mode"]) == ("preempting", "job 9", "graceful")
    assert commands(client, ns) == [{"type": "preempt", "job": job_id, "epoch": epoch, "mode": "graceful",
                                     "keep": [], "by": "job 9", "reason": "for job 9", "keep_wait": True}]
    control.malformed(commands(client, ns)[0])  # shaped as the agent reads it


def test_the_scheduler_reads_which_job_a_stopping_victim_was_preempted_for(client, ns):
    # a team's guarantee counts the GPUs on their way to it (policy/teams.py): the victim's record says for whom
    from dispatcher.store.snapshot import read_snapshot
    from dispatcher.store.spec_cache import SpecCache

    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    assert preempt(s, job_id, epoch) == Outcome.DONE
    [victim] = read_snapshot(client, ns, now_ms(), 3600, SpecCache()).snapshot.running
    assert (victim.stopping, victim.preempted_for) == (True, "9")


@pytest.mark.parametrize("refusal", ["stale epoch", "not running", "already stopping", "another leads"])
def test_a_refused_preemption_leaves_neither_the_mark_nor_the_command(client, ns, refusal):
    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    expected, kw = Outcome.STALE, {}
    if refusal == "stale epoch":
        epoch -= 1
    elif refusal == "not running":
        assert s.finish(job_id, "n1", epoch, "succeeded", 0, now_ms()) == Outcome.DONE
    elif refusal == "already stopping":
        assert preempt(s, job_id, epoch) == Outcome.DONE
        client.delete(keys.node_control(ns, "n1"))
    else:
        expected, kw = Outcome.NOT_LEADER, {"fence": "1 somebody-else"}
    before = client.hgetall(keys.job(ns, job_id))
    assert preempt(s, job_id, epoch, **kw) == expected
    assert client.hgetall(keys.job(ns, job_id)) == before
    assert commands(client, ns) == []


def test_a_preemption_meeting_a_control_stream_of_the_wrong_type_writes_nothing(client, ns):
    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    client.set(keys.node_control(ns, "n1"), "not a stream")
    with pytest.raises(Exception, match="WRONGTYPE"):
        preempt(s, job_id, epoch)
    assert read_job(client, ns, job_id)["state"] == "running"


def test_a_shrink_sends_the_gpus_it_keeps(client, ns):
    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    pipe = client.pipeline(transaction=True)
    control.preempt(s, "n1", job_id, epoch, now_ms(), by="job 9", mode="shrink", reason="r", keep=(0,),
                    keep_wait=False, client=pipe)
    assert pipe.execute() == [Outcome.DONE]
    (cmd,) = commands(client, ns)
    assert (cmd["type"], cmd["keep"], cmd["keep_wait"]) == ("shrink", [0], False)


def test_cancelling_an_active_job_queues_its_cancel_with_it_and_a_pending_one_sends_nothing(client, ns):
    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    (waiting,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms())])
    assert cancel_job(s, client, ns, waiting, now_ms()) == "cancelled"
    assert commands(client, ns) == []
    assert cancel_job(s, client, ns, job_id, now_ms(), "bye") == "requested"
    assert read_job(client, ns, job_id)["cancel_requested"]
    assert commands(client, ns) == [{"type": "cancel", "job": job_id, "epoch": epoch, "reason": "bye"}]
    assert control.cancel(s, client, ns, "404", now_ms(), "nobody") == Outcome.NO_JOB
    assert cancel_job(s, client, ns, waiting, now_ms()) == "cancelled"  # ENDED: the state it had
    assert s.cancel(waiting, now_ms(), "again") == Outcome.ENDED


def test_a_start_that_meets_a_cancel_asked_after_its_launch_read_the_record_counts_as_a_start(client, ns):
    # the agent's cancel for it came before the process existed ("not running here"); mark_running then met
    # cancel_ms and refused the start: the job ran with no started_ms, killed with no grace, its GPU time lost
    s = Scripts(client, ns)
    (job_id,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=1)])
    epoch = s.commit_placement(job_id, "n1", (0,), 0, now_ms())
    assert cancel_job(s, client, ns, job_id, now_ms(), "bye") == "requested"
    assert s.mark_running(job_id, epoch, now_ms(), 4242) == Outcome.CANCEL_REQUESTED
    job = read_job(client, ns, job_id)
    assert job["state"] == "running" and job["started_at"] and job["cancel_requested"], job
    assert s.finish(job_id, "n1", epoch, "cancelled", -15, now_ms(), "bye") == Outcome.DONE
    assert read_job(client, ns, job_id)["state"] == "cancelled"


@pytest.mark.parametrize("how", ["lost with its agent", "lost with its agent, its last retry", "preempted"])
def test_a_job_cancelled_while_it_runs_is_not_requeued_when_its_attempt_ends_otherwise(client, ns, how):
    # the user's cancel is in flight (the agent has it, the job has cancel_ms) when the attempt ends
    # another way: its agent restarts, its node is declared dead, or a preemption took it first
    s = Scripts(client, ns)
    job_id, epoch = running(client, ns, s)
    assert cancel_job(s, client, ns, job_id, now_ms(), "bye") == "requested"
    lost = how.startswith("lost")
    assert s.finish(job_id, "n1", epoch, "pending", None, now_ms(), "node n1 agent restarted; attempt lost",
                    preempted=not lost, lost_retries=(0 if "last" in how else 3) if lost else None) == Outcome.DONE
    job = read_job(client, ns, job_id)
    assert job["state"] == "cancelled" and job["reason"].startswith("bye; its attempt ended first")  # (who asked)
    assert client.zscore(keys.jobs_pending(ns), job_id) is None
    assert client.hgetall(keys.node_alloc(ns, "n1")) == {}


def test_finish_args_are_in_the_order_of_the_scripts_header():
    header = scripts.source("finish").split("\nif ", 1)[0]
    named = sorted({int(n) for n in re.findall(r"ARGV\[(\d+)\]", header)})
    assert named == list(range(1, len(FinishArgs.__dataclass_fields__) + 1))
    args = FinishArgs(job_id="7", epoch=3, state="pending", exit_code=None, now_ms=5, reason="r", preempted=True,
                      keep_wait=False, checkpointable=True, lost_retries=2, fence="", kept_per_fingerprint=None,
                      kept_per_user=50, est_s=1.5)
    assert args.argv() == ["7", 3, "pending", "", 5, "r", "1", "0", "1", 2, "", "", 50, "1.5", "", "0", "0", "",
                           *counters.script_histogram("job_run", "class"), "0"]


def test_every_outcome_a_script_header_lists_is_named():
    codes = {m.value: m.name for m in Outcome}
    for name in ("commit_placement", "mark_running", "finish", "cancel", "preempt", "checkpointed", "idle_warning"):
        header = scripts.source(name).split("\nif ", 1)[0].split("\nlocal ", 1)[0]
        listed = re.findall(r"(-?\d+) ([A-Z_]+)", header[header.index("-- returns"):])
        assert listed, name
        assert all(codes.get(int(code)) == label for code, label in listed), (name, listed)


def gang_job(client, ns, gpus=4):
    (job_id,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=gpus,
                                                   nodes=2, gpus_per_node=gpus // 2)])
    return job_id


def test_a_gang_is_placed_on_every_node_at_once_or_not_at_all(client, ns):
    s = Scripts(client, ns)
    other, _ = running(client, ns, s, node="n2")  # holds n2's GPU 0
    job_id = gang_job(client, ns)
    assert s.commit_gang(job_id, [("n1", (0, 1)), ("n2", (0, 1))], 0, now_ms()) == Outcome.GPU_HELD
    assert client.hgetall(keys.node_alloc(ns, "n1")) == {}  # nothing of it held on the free node either
    assert read_job(client, ns, job_id)["state"] == "pending"
    epoch = s.commit_gang(job_id, [("n1", (0, 1)), ("n3", (2, 3))], 0, now_ms())
    assert epoch == 1 and read_job(client, ns, job_id)["ranks"] == [["n1", [0, 1]], ["n3", [2, 3]]]
    assert client.hgetall(keys.node_alloc(ns, "n3")) == {b"2": job_id.encode(), b"3": job_id.encode()}


def test_a_gang_ends_rank_by_rank_and_its_first_failure_is_what_it_ends_as(client, ns):
    s = Scripts(client, ns)
    job_id = gang_job(client, ns)
    epoch = s.commit_gang(job_id, [("n1", (0, 1)), ("n2", (0, 1))], 0, now_ms())
    assert s.mark_running(job_id, epoch, now_ms(), 1) == Outcome.DONE
    assert s.mark_running(job_id, epoch, now_ms(), 2) == Outcome.DONE  # rank 1 starts while the gang runs
    # rank 1 fails: the gang stops (its other rank sees `preempting`), rank 1's GPUs come back
    assert s.finish(job_id, "n2", epoch, "pending", 3, now_ms(), "rank 1 ended (exit code 3)", rank=1,
                    lost_retries=3) == Outcome.DONE
    j = read_job(client, ns, job_id)
    assert j["state"] == "preempting" and client.hgetall(keys.node_alloc(ns, "n2")) == {}
    assert s.finish(job_id, "n2", epoch, "pending", 3, now_ms(), "again", rank=1) == Outcome.STALE  # recorded
    # rank 0 stops with its gang: the gang goes back to the queue as one lost attempt
    assert s.finish(job_id, "n1", epoch, "pending", -15, now_ms(), "stopped with its gang", rank=0,
                    for_gang=True) == Outcome.DONE
    j = read_job(client, ns, job_id)
    assert (j["state"], j["lost"], j["attempt"], j["ranks"]) == ("pending", 1, 1, [])
    assert j["attempts"][0]["outcome"] == "lost" and "rank 1" in j["attempts"][0]["reason"]
    assert client.hgetall(keys.node_alloc(ns, "n1")) == {}


@pytest.mark.parametrize("code, own, kept", [(3, True, 3), (-9, True, -9), (-9, False, None)])
def test_a_gang_out_of_retries_fails_with_its_ranks_own_exit_code(client, ns, code, own, kept):
    # a rank that exited 3 every time: the job fails with 3 (`dispatch wait` exits 3, as Slurm's step), not
    # with no code at all; so does a rank the kernel's OOM killer killed (137, as a one-node job); a signal
    # dispatch sent (a hang's kill) stays in its attempt only
    s = Scripts(client, ns)
    job_id = gang_job(client, ns)
    epoch = s.commit_gang(job_id, [("n1", (0, 1)), ("n2", (0, 1))], 0, now_ms())
    assert s.mark_running(job_id, epoch, now_ms(), 1) == Outcome.DONE
    assert s.finish(job_id, "n2", epoch, "pending", code, now_ms(), "rank 1 ended", rank=1,
                    lost_retries=0, own_code=own) == Outcome.DONE
    assert s.finish(job_id, "n1", epoch, "pending", -15, now_ms(), "stopped with its gang", rank=0,
                    for_gang=True) == Outcome.DONE
    j = read_job(client, ns, job_id)
    assert (j["state"], j["exit_code"]) == ("failed", kept) and "gave up after 1 lost attempts" in j["reason"], j


def test_a_cycles_reason_does_not_write_over_a_hold_or_a_job_that_moved_on(client, ns):
    """A cycle judges a job, then the job is held (or placed) before the cycle writes its reason: the
    held reason stays, and a job that is no longer pending gets no waiting reason."""
    from dispatcher.store import job_record

    s = Scripts(client, ns)
    (job_id,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=1)])
    started, _ = running(client, ns, s)
    assert s.hold(job_id, "hold", f"u {now_ms()}", "held by u (dispatch release 1)") == Outcome.DONE
    pipe = client.pipeline(transaction=True)
    for j in (job_id, started):
        job_record.set_reason(s, pipe, ns, j, "needs 1xGPU", {"code": "blocked", "at_ms": now_ms()})
    assert pipe.execute() == [Outcome.STALE, Outcome.STALE]
    assert read_job(client, ns, job_id)["reason"] == "held by u (dispatch release 1)"
    assert read_job(client, ns, started)["reason"] == ""
    assert s.hold(job_id, "release", f"u {now_ms()}") == Outcome.DONE
    pipe = client.pipeline(transaction=True)
    job_record.set_reason(s, pipe, ns, job_id, "needs 1xGPU", {"code": "blocked", "at_ms": now_ms()})
    assert pipe.execute() == [Outcome.DONE] and read_job(client, ns, job_id)["reason"] == "needs 1xGPU"


def test_scripts_on_a_pipeline_run_without_a_script_exists_round_trip_even_after_a_script_flush(client, ns):
    """A pipeline sends each script's source once (EVAL), then its sha: no SCRIPT EXISTS first, and a
    server that lost its scripts (a restart, SCRIPT FLUSH) runs them all the same."""
    s = Scripts(client, ns)
    ids = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=1)
                                  for _ in range(3)])
    client.script_flush()
    pipe = client.pipeline(transaction=True)
    asked = []  # what the pipeline sends on its own before its commands (redis-py's SCRIPT EXISTS)
    send_now = pipe.immediate_execute_command
    pipe.immediate_execute_command = lambda *args, **kw: asked.append(args[0]) or send_now(*args, **kw)
    for i, job_id in enumerate(ids):
        s.commit_placement(job_id, "n1", (i,), 0, now_ms(), client=pipe)
    assert pipe.execute() == [1, 1, 1]
    client.script_flush()
    for job_id in ids:  # the same pipeline object again, after the server forgot the scripts
        s.mark_running(job_id, 1, now_ms(), 4242, client=pipe)
    assert pipe.execute() == [Outcome.DONE] * 3
    assert asked == []
    assert [read_job(client, ns, i)["state"] for i in ids] == ["running"] * 3

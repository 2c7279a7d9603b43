"""A shrink (shrink.lua) keeps the attempt that ran on all the GPUs in the job's attempts list, as a
preemption does: `show` lists it, the job's wait stays submit to its first start (queue's WAIT, report's),
and the accounting counts its GPU time (it read the restart as the job's first start, on fewer GPUs)."""

from dispatcher.clock import now_ms
from dispatcher.core.accounting import attempt_spans, queue_wait
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import control
from dispatcher.store.jobs import read_job
from dispatcher.store.scripts import Scripts
from tests.redis.test_store import beat, submit


def test_a_shrunk_jobs_first_attempt_is_kept_with_its_start_and_its_gpus(client, ns):
    beat(client, ns, "a", gpus=4)
    job_id = submit(client, ns, gpus=4, checkpointable=True)
    Scheduler(client, ns).cycle()
    scripts, t = Scripts(client, ns), now_ms()
    epoch = read_job(client, ns, job_id)["epoch"]
    assert scripts.mark_running(job_id, epoch, t, 4242) == 1
    pipe = client.pipeline(transaction=True)
    control.preempt(scripts, "a", job_id, epoch, t + 20_000, by="job 9", mode="shrink", reason="r", keep=(0, 3),
                    keep_wait=False, client=pipe)
    pipe.execute()
    restarted = scripts.shrink(job_id, "a", epoch, [0, 3], t + 20_000)
    assert restarted == epoch + 1 and scripts.mark_running(job_id, restarted, t + 21_000, 4243) == 1
    job = read_job(client, ns, job_id)
    (first,) = job["attempts"]
    assert (first["attempt"], first["outcome"], first["node"], first["reason"]) == (0, "shrunk", "a",
                                                                                   "shrunk to 2 of 4 GPUs (keeps GPUs 0,3)")
    assert first["started_at"] == t / 1000 and first["ended_at"] == (t + 20_000) / 1000
    assert queue_wait(job) == first["started_at"] - job["submitted_at"]  # not to the restart
    (span,) = attempt_spans(job)  # (the running attempt counts once it ends)
    assert (span[1] - span[0], len(span[2])) == (20.0, 4), span  # 4 GPUs for 20 s

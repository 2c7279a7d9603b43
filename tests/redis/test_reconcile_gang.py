"""An agent's reconcile (workers/recovery.py) after an outage: a gang that another rank started while this
node's launch still waits in its RQ queue (RQ reconnecting) is not taken for a lost attempt; once no
launch waits, it is."""

from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.store.scripts import Outcome, Scripts
from workers.jobs import Supervisor
from workers.recovery import reconcile


def test_a_gang_rank_whose_launch_still_waits_is_not_lost_and_one_whose_launch_is_gone_is(client, ns, tmp_path):
    from rq import Queue

    s = Scripts(client, ns)
    (job_id,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=2,
                                                   nodes=2, gpus_per_node=1)])
    epoch = s.commit_gang(job_id, [("n1", (0,)), ("n2", (0,))], 0, now_ms())
    assert s.mark_running(job_id, epoch, now_ms() - 60_000, 4242) == Outcome.DONE  # rank 0 runs on n1
    queue = Queue.redis_queue_namespace_prefix + keys.rq_queue_name(ns, "n2")
    client.rpush(queue, "a-launch-of-rank-1")  # n2's launch, not yet taken by its RQ worker
    sup = Supervisor(client, ns, "n2", s, tmp_path / "work")
    assert reconcile(sup, "node n2 runs no such attempt") == []
    assert read_job(client, ns, job_id)["state"] == "running" and read_job(client, ns, job_id)["lost"] == 0
    client.delete(queue)  # the launch is gone, and n2 runs nothing of the gang: its rank is lost
    assert reconcile(sup, "node n2 runs no such attempt") == [job_id]

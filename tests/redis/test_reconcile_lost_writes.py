"""An agent's reconcile (workers/recovery.py) of an attempt it started itself, whose start and end a
restarted server lost (killed while its append-only file lagged): the record says `assigned` here, at that
epoch, and no launch waits in the node's queue. It is not a launch in flight (the agent ran it), so it is
dealt with at the next reconcile, not after ASSIGNED_SETTLE_MS: an attempt that ended on its own is
recorded as it ended, one that was killed goes back to the queue."""

import signal
import time

from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.store.scripts import Scripts
from workers.jobs import Supervisor
from workers.recovery import reconcile


def lose_writes_after(client, ns):
    """The namespace's keys as they are now; calling the result puts them back (a server restarted from a
    file that had only the writes until now)."""
    saved = {k: client.dump(k) for k in client.scan_iter(match=f"{ns}:*")}

    def restore():
        for k in client.scan_iter(match=f"{ns}:*"):
            if k not in saved:
                client.delete(k)
        for k, v in saved.items():
            client.restore(k, 0, v, replace=True)
    return restore


def placed(client, ns, command):
    s = Scripts(client, ns)
    (job_id,) = write_jobs(client, ns, [build_spec(command=command, user="u", submit_ms=now_ms(), gpus=1)])
    return s, job_id, s.commit_placement(job_id, "n1", (0,), 0, now_ms())


def until(predicate, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_attempt_that_ended_on_its_own_is_recorded_as_it_ended_though_the_server_lost_it(client, ns, tmp_path):
    s, job_id, epoch = placed(client, ns, ["sh", "-c", "exit 3"])
    restore = lose_writes_after(client, ns)
    sup = Supervisor(client, ns, "n1", s, tmp_path / "work")
    assert sup.launch(job_id, epoch) == "started"
    until(lambda: read_job(client, ns, job_id)["state"] == "failed" and job_id not in sup.running)
    restore()
    assert read_job(client, ns, job_id)["state"] == "assigned"
    assert reconcile(sup, "node n1 runs no such attempt") == []  # not rerun: it ended here
    job = read_job(client, ns, job_id)
    assert (job["state"], job["exit_code"], job["epoch"]) == ("failed", 3, epoch)


def test_an_attempt_killed_here_whose_start_and_end_the_server_lost_goes_back_to_the_queue_at_once(client, ns,
                                                                                                  tmp_path):
    s, job_id, epoch = placed(client, ns, ["sleep", "60"])
    restore = lose_writes_after(client, ns)
    sup = Supervisor(client, ns, "n1", s, tmp_path / "work")
    assert sup.launch(job_id, epoch) == "started"
    until(lambda: read_job(client, ns, job_id)["state"] == "running")
    sup.running[job_id].proc.send_signal(signal.SIGKILL)  # someone's kill -9: it fails, once
    until(lambda: read_job(client, ns, job_id)["state"] == "failed" and job_id not in sup.running)
    restore()
    assert read_job(client, ns, job_id)["state"] == "assigned"
    assert reconcile(sup, "node n1 runs no such attempt") == [job_id]  # nothing runs it: not a kill's end
    job = read_job(client, ns, job_id)
    assert (job["state"], job["epoch"]) == ("pending", epoch + 1)

"""Reading ended jobs for `dispatch report` and `history` (store/ended.py): a window of end times, a few
pipelined round trips per batch of jobs, and unreadable records skipped and counted."""

from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.ended import read_ended
from dispatcher.store.jobs import cancel_job, write_jobs
from dispatcher.store.scripts import Scripts


class Counted:
    """A real client that counts the round trips it makes (each command or pipeline sent)."""

    def __init__(self, client):
        self.client, self.trips = client, 0

    def pipeline(self, **kw):
        pipe = self.client.pipeline(**kw)
        send = pipe.execute

        def execute(**how):
            self.trips += 1
            return send(**how)

        pipe.execute = execute
        return pipe

    def __getattr__(self, name):
        self.trips += 1
        return getattr(self.client, name)


def test_jobs_that_ended_in_the_window_are_read_in_batches_and_bad_records_are_counted(client, ns):
    specs = [build_spec(user="ana", team="vision", submit_ms=now_ms(), command=["true"]) for _ in range(7)]
    ids = write_jobs(client, ns, specs)
    s = Scripts(client, ns)
    early = now_ms()
    cancel_job(s, client, ns, ids[0], early - 60_000)  # ended before the window
    since = now_ms()
    for job_id in ids[1:6]:
        cancel_job(s, client, ns, job_id, now_ms())
    # ids[6] is still pending: not ended
    client.hset(keys.job(ns, ids[4]), "spec", b"\xc1 not msgpack")  # a spec no one can read
    client.delete(keys.job(ns, ids[5]))
    client.set(keys.job(ns, ids[5]), "a string, not a hash")

    counted = Counted(client)
    views, skipped = read_ended(counted, ns, ended_since_ms=since, ended_until_ms=now_ms() + 1, batch=3)
    assert [v["id"] for v in views] == ids[1:4] and skipped == 2
    assert all(v["state"] == "cancelled" and v["team"] == "vision" and v["attempts"] == [] for v in views)
    assert counted.trips <= 1 + 2 * 3  # the index, then two per batch of 3 (7 jobs: 3 batches)

    everything, _ = read_ended(client, ns)
    assert {v["id"] for v in everything} == set(ids[:4])


def test_ended_jobs_that_share_a_submit_time_come_in_numeric_id_order_not_as_text(client, ns):
    at = now_ms()  # an array's elements, or the jobs of one `submit --from`, share their submit time
    ids = write_jobs(client, ns, [build_spec(user="ana", submit_ms=at, command=["true"]) for _ in range(12)])
    s = Scripts(client, ns)
    for job_id in ids:
        cancel_job(s, client, ns, job_id, now_ms())
    assert any(len(i) > len(ids[0]) for i in ids)  # ('10' sorts before '2' as text)
    assert [v["id"] for v in read_ended(client, ns)[0]] == ids


def test_a_job_preempted_then_cancelled_while_pending_ran_in_history_and_its_csv(client, ns):
    # it ran 5 minutes, was preempted, then cancelled in the queue: history said RAN '-' and started_at None
    # while billing the 5 minutes (duration_s 300), and its --csv (the trace simulate replays) left it out
    from dispatcher.cli.lab import history_rows

    t = now_ms()
    (job,) = write_jobs(client, ns, [build_spec(command=["true"], user="carol", submit_ms=t - 400_000, gpus=1)])
    scripts = Scripts(client, ns)
    epoch = scripts.commit_placement(job, "n1", (0,), 0, t - 390_000)
    assert scripts.mark_running(job, epoch, t - 390_000, 4242) == 1
    assert scripts.finish(job, "n1", epoch, "pending", None, t - 90_000, "preempted (forced) by job 26",
                          preempted=True) == 1
    cancel_job(scripts, client, ns, job, now_ms())
    for ran_only in (False, True):
        _, (row,) = history_rows(client, ns, None, ran_only=ran_only)
        assert (row["state"], row["ran"], row["started_at"], row["duration_s"]) == (
            "cancelled", True, (t - 390_000) / 1000, 300.0), row

"""The store against a real server: submit, the Lua transitions, fencing, quarantine."""

import msgpack
import pytest

from dispatcher.core.model import GpuInfo
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.jobs import cancel_job, read_job, write_jobs
from dispatcher.store.nodes import read_nodes, write_heartbeat
from dispatcher.store.scripts import Outcome, Scripts


def submit(client, ns, **kw):
    kw.setdefault("command", ["true"])
    spec = build_spec(user="alice", submit_ms=now_ms(), **kw)
    (job_id,) = write_jobs(client, ns, [spec])
    return job_id


def beat(client, ns, name="n1", gpus=2):
    write_heartbeat(client, ns, name, [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(gpus)], 8, 64.0,
                    now_ms())


def test_submit_writes_the_record_and_both_indexes_atomically(client, ns):
    a, b = submit(client, ns, gpus=1), submit(client, ns)
    assert int(b) == int(a) + 1
    assert client.zcard(keys.jobs_pending(ns)) == 2 and client.zcard(keys.jobs_all(ns)) == 2
    job = read_job(client, ns, a)
    assert (job["state"], job["attempt"], job["gpus_requested"], job["user"]) == ("pending", 0, 1, "alice")


def test_commit_refuses_a_job_that_is_not_pending_or_whose_epoch_moved_or_whose_gpu_is_held(client, ns):
    s = Scripts(client, ns)
    a, b = submit(client, ns, gpus=1), submit(client, ns, gpus=1)
    assert s.commit_placement(a, "n1", (0,), 0, now_ms()) == 1
    assert s.commit_placement(a, "n1", (1,), 0, now_ms()) == Outcome.NOT_PENDING
    assert s.commit_placement(b, "n1", (1,), 5, now_ms()) == Outcome.EPOCH_MOVED  # the plan saw 5
    assert s.commit_placement(b, "n1", (0,), 0, now_ms()) == Outcome.GPU_HELD  # by a
    assert client.hgetall(keys.node_alloc(ns, "n1")) == {b"0": a.encode()}


def test_a_stale_epoch_cannot_report_an_outcome(client, ns):
    s = Scripts(client, ns)
    a = submit(client, ns, gpus=1)
    epoch = s.commit_placement(a, "n1", (0,), 0, now_ms())
    assert s.mark_running(a, epoch, now_ms(), 123) == Outcome.DONE
    assert s.finish(a, "n1", epoch, "pending", None, now_ms(), "requeued") == Outcome.DONE  # epoch + 1
    assert s.finish(a, "n1", epoch, "succeeded", 0, now_ms()) == Outcome.STALE  # the old copy is fenced off
    job = read_job(client, ns, a)
    assert (job["state"], job["attempt"], job["epoch"]) == ("pending", 1, epoch + 1)
    assert client.hlen(keys.node_alloc(ns, "n1")) == 0


def test_cancel_ends_a_pending_job_and_flags_an_active_one(client, ns):
    s = Scripts(client, ns)
    a, b = submit(client, ns), submit(client, ns, gpus=1)
    s.commit_placement(b, "n1", (0,), 0, now_ms())
    assert cancel_job(s, client, ns, a, now_ms()) == "cancelled"
    assert cancel_job(s, client, ns, b, now_ms()) == "requested"
    assert read_job(client, ns, a)["state"] == "cancelled" and read_job(client, ns, b)["cancel_requested"]
    assert cancel_job(s, client, ns, a, now_ms()) == "cancelled"  # already final: says so, changes nothing


@pytest.mark.parametrize("garbage", [b"\xff\x00junk", msgpack.packb([1, 2, 3]), msgpack.packb({"v": 99}),
                                     msgpack.packb({"v": 1, "cmd": "rm -rf /"}), b"x" * 300_000],
                         ids=["not-msgpack", "not-a-map", "wrong-version", "missing-fields", "huge"])
def test_a_malformed_record_is_quarantined_and_the_others_still_run(client, ns, garbage):
    beat(client, ns)
    good = submit(client, ns, gpus=1)
    bad = submit(client, ns, gpus=1)
    client.hset(keys.job(ns, bad), "spec", garbage)
    plan = Scheduler(client, ns).cycle()
    assert [p.job_id for p in plan.placements] == [good]
    job = read_job(client, ns, bad)
    assert job["state"] == "failed" and job["reason"].startswith("quarantined:"), job
    assert client.zscore(keys.jobs_pending(ns), bad) is None
    assert read_job(client, ns, good)["state"] == "assigned"


def test_the_scheduler_places_on_live_nodes_only(client, ns):
    write_heartbeat(client, ns, "old", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms() - 60_000)
    job = submit(client, ns, gpus=1)
    sched = Scheduler(client, ns)
    plan = sched.cycle()
    assert plan.placements == () and "no live node" in plan.verdicts[0].reason
    beat(client, ns, "fresh")
    plan = sched.cycle()
    assert [(p.job_id, p.node) for p in plan.placements] == [(job, "fresh")]


def test_a_node_record_of_the_wrong_type_costs_that_node_not_the_cycle(client, ns):
    beat(client, ns, "bad")
    client.delete(keys.node(ns, "bad"))
    client.set(keys.node(ns, "bad"), "not a hash")  # still in the heartbeat index
    beat(client, ns, "good")
    job = submit(client, ns, gpus=1)
    nodes, problems = read_nodes(client, ns)  # a view skips it and says so
    assert [n.name for n in nodes] == ["good"] and len(problems) == 1 and "bad" in problems[0]
    plan = Scheduler(client, ns).cycle()
    assert [(p.job_id, p.node) for p in plan.placements] == [(job, "good")]
    assert client.type(keys.node(ns, "bad")) == b"none"  # set aside (its agent writes it again at its next beat)
    (moved,) = client.keys(keys.quarantined(ns, keys.node(ns, "bad"), 0)[:-1] + "*")
    assert client.get(moved) == b"not a hash"


def test_a_placement_enqueues_an_rq_job_with_plain_json_arguments(client, ns):
    beat(client, ns)
    job = submit(client, ns, gpus=1)
    Scheduler(client, ns).cycle()
    from rq import Queue
    from rq.serializers import JSONSerializer

    (rq_job,) = Queue(keys.rq_queue_name(ns, "n1"), connection=client, serializer=JSONSerializer).get_jobs()
    assert rq_job.func_name == "workers.jobs.launch" and rq_job.args == [job, 1]
    assert b"pickle" not in (client.hget(f"rq:job:{rq_job.id}", "data") or b"")


def test_the_mirror_rereads_only_nodes_whose_scheduling_facts_changed(client, ns):
    from dataclasses import replace

    from dispatcher.config import Timing
    from dispatcher.policy import PolicyConfig
    from dispatcher.scheduler.mirror import Mirror
    from dispatcher.store.nodes import schedule_facts

    gpus = [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(2)]
    for name in ("n1", "n2", "n3"):
        write_heartbeat(client, ns, name, gpus, 8, 64.0, now_ms())
    mirror = Mirror(client, ns)
    timeout = Timing().node_timeout_s
    mirror.sync(now_ms(), timeout, PolicyConfig())  # the first read takes every record
    busy = [replace(g, util_pct=93.0, mem_used_gb=30.0) for g in gpus]
    assert schedule_facts(busy, 8, 64.0) == schedule_facts(gpus, 8, 64.0)
    write_heartbeat(client, ns, "n1", busy, 8, 64.0, now_ms(), changed=False)  # only utilization moved
    blocked = [replace(gpus[0], blocked="pid 77 (not a job)"), gpus[1]]
    write_heartbeat(client, ns, "n2", blocked, 8, 64.0, now_ms(),
                    changed=schedule_facts(blocked, 8, 64.0) != schedule_facts(gpus, 8, 64.0))

    read = mirror.sync(now_ms(), timeout, PolicyConfig())
    views = {v.name: v for v in read.snapshot.nodes}
    assert views["n2"].free_gpus == (1,)  # the blocked GPU is seen at once
    assert views["n1"].free_gpus == views["n3"].free_gpus == (0, 1)
    assert read.nodes[0].gpus[0].util_pct == 0.0  # n1's utilization was not reread (samples read all)
    assert not client.exists(keys.nodes_changed(ns))
    full = mirror.sync(now_ms(), timeout, PolicyConfig(), all_nodes=True)
    assert {n.name: n.gpus[0].util_pct for n in full.nodes}["n1"] == 93.0


def test_a_read_in_batches_gives_what_one_read_gives(client, ns, monkeypatch):
    """Past snapshot.BATCH jobs, read_jobs reads the next batch while this one is decoded: the same
    jobs, in the same order, with the same verdicts on bad records, as one read."""
    from dispatcher.store import snapshot

    t = now_ms()
    ids = write_jobs(client, ns, [build_spec(command=["true"], user=f"u{i % 3}", submit_ms=t + i, gpus=1 + i % 2)
                                  for i in range(11)])
    client.hset(keys.job(ns, ids[4]), "spec", b"\xc1")  # one bad record among them
    one = list(snapshot.read_jobs(client, ns, ids, snapshot.SpecCache()))
    monkeypatch.setattr(snapshot, "BATCH", 3)
    batched = list(snapshot.read_jobs(client, ns, ids, snapshot.SpecCache()))
    assert [j for j, _ in batched] == [j for j, _ in one] == ids
    assert [type(w).__name__ for _, w in batched] == [type(w).__name__ for _, w in one]
    assert isinstance(batched[4][1], Exception)
    assert [w[0].spec for _, w in batched if isinstance(w, tuple)] == [w[0].spec for _, w in one if isinstance(w, tuple)]


def test_the_last_lines_of_a_log_come_whole_across_chunks_as_tail_n(client, ns):
    from dispatcher.store.jobs import append_log, read_log, read_log_tail

    assert read_log_tail(client, ns, "7", 3) == ("-", b"")  # no output yet
    text = b"".join(b"line %d\n" % i for i in range(1000))
    for at in range(0, len(text), 11):  # chunks that cut lines anywhere, more of them than one read takes
        append_log(client, ns, "7", text[at:at + 11])
    newest = read_log(client, ns, "7")[-1][0]
    assert read_log_tail(client, ns, "7", 3) == (newest, b"line 997\nline 998\nline 999\n")
    assert read_log_tail(client, ns, "7", 5000)[1] == text  # fewer lines than asked: all of them
    assert read_log_tail(client, ns, "7", 0) == (newest, b"")  # -n 0 -f: only what comes next
    append_log(client, ns, "7", b"partial")  # a last line not ended yet counts, as tail's does
    assert read_log_tail(client, ns, "7", 2)[1] == b"line 999\npartial"


def test_queue_lists_the_oldest_jobs_by_number_when_one_file_shares_a_submit_time(client, ns):
    """QA: jobs of one `submit --from` file tie in the pending index, and Redis orders ties as text
    ("10" before "2"), so `queue --limit 3` listed 1, 10, 11 while 2 and 3 (as old) waited; `--all`
    and the dashboard's pages cut the same index the same way."""
    from dispatcher.store.jobs import read_queue
    from dispatcher.views.board import Board

    at = now_ms() - 60_000
    older = write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=at - 1000, gpus=1)])
    ids = older + write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=at, gpus=1)
                                          for _ in range(11)])
    assert ids == [str(i) for i in range(1, 13)]
    assert [j["id"] for j in read_queue(client, ns, limit=3)] == ["1", "2", "3"]
    assert [j["id"] for j in read_queue(client, ns, limit=1)] == ["1"]
    assert [j["id"] for j in read_queue(client, ns, limit=20)] == ids
    assert [j["id"] for j in read_queue(client, ns, include_final=True, limit=3)] == ["1", "2", "3"]
    board = Board(client, ns)
    assert [j["id"] for j in board.queue_page("pending", "", 1, 5)["jobs"]] == ["6", "7", "8", "9", "10"]
    assert [j["id"] for j in board.queue_page("pending", "", 2, 5)["jobs"]] == ["11", "12"]


def test_queue_all_lists_an_old_pending_job_beside_the_latest_finished_ones_in_number_order(client, ns):
    """QA: `queue --all` read only the latest 1000 jobs of the all-jobs index, so after a finished sweep of
    1000 a job pending or running since before it was not listed (and the footer counted it as 'more')."""
    from dispatcher.store.jobs import cancel_job, read_queue
    from dispatcher.store.scripts import Scripts

    at = now_ms() - 60_000
    ids = write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=at - 1000, gpus=1)])
    sweep = write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=at, gpus=1) for _ in range(11)])
    for job_id in sweep:
        cancel_job(Scripts(client, ns), client, ns, job_id, now_ms())
    assert [j["id"] for j in read_queue(client, ns, include_final=True, limit=3)] == ["1", "10", "11", "12"]

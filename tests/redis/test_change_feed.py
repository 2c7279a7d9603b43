"""The change feed (store/feed.py): a standby follows the leader's takes of the changed-jobs set, so
that taking the lead costs what changed since, not a read of the whole queue; a feed that lost the
entries past a reader's place makes it read everything again. Against a real server, with the real
Scheduler (its mirror is the one under test)."""

import msgpack

from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import feed, keys
from dispatcher.store.jobs import read_job
from dispatcher.store.scripts import Scripts
from tests.redis.test_store import beat, submit


def leader_and_standby(client, ns):
    s1, s2 = Scheduler(client, ns, holder="s1"), Scheduler(client, ns, holder="s2")
    s1.cycle()
    s2.cycle()
    assert s1.leading and not s2.leading
    return s1, s2


def test_a_standby_mirrors_the_queue_from_the_leaders_takes(client, ns):
    beat(client, ns, "a", gpus=1)
    first = submit(client, ns, gpus=1)
    s1, s2 = leader_and_standby(client, ns)
    assert read_job(client, ns, first)["state"] == "assigned"
    later = [submit(client, ns, gpus=1) for _ in range(3)]  # no room: they wait
    s1.cycle()
    s2.cycle()
    assert set(s2.mirror.backlog.jobs) == set(s1.mirror.backlog.jobs) == set(later)
    assert set(s2.mirror.running) == set(s1.mirror.running) == {first}
    assert s2.mirror.changed == 4  # it reread the three new jobs and the one placed, not the queue
    assert not client.exists(keys.jobs_changed(ns))  # the leader took the set; the standby never does

    epoch = read_job(client, ns, first)["epoch"]
    Scripts(client, ns).finish(first, "a", epoch, "succeeded", 0, now_ms())
    s1.cycle()  # takes the end
    s2.cycle()
    assert set(s2.mirror.running) == set(s1.mirror.running) and first not in s2.mirror.running
    assert set(s2.mirror.backlog.jobs) == set(s1.mirror.backlog.jobs)


def test_a_takeover_rereads_only_what_changed_since_the_standby_last_looked(client, ns):
    beat(client, ns, "a", gpus=1)
    queued = [submit(client, ns, gpus=1) for _ in range(20)]
    s1, s2 = leader_and_standby(client, ns)
    running = {j.decode() for j in client.zrange(keys.jobs_active(ns), 0, -1)}
    assert len(running) == 1
    s1.lease.release()  # the leader stops; two jobs arrive before anyone takes the set
    extra = [submit(client, ns, gpus=1) for _ in range(2)]
    plan = s2.cycle()
    assert s2.leading
    assert s2.mirror.changed == 3  # the two new ones and the one placed: not the 22 of a whole read
    assert set(s2.mirror.running) == running and plan.placements == ()  # the one GPU is held
    assert set(s2.mirror.backlog.jobs) == set(queued + extra) - running


def test_a_feed_that_lost_the_standbys_place_makes_it_read_everything_again(client, ns):
    beat(client, ns, "a", gpus=1)
    for _ in range(5):
        submit(client, ns, gpus=1)
    s1, s2 = leader_and_standby(client, ns)
    submit(client, ns, gpus=1)
    s1.cycle()  # a take the standby has not read ...
    client.xtrim(keys.jobs_feed(ns), maxlen=0)  # ... trimmed away (or lost with the server)
    submit(client, ns, gpus=1)
    s1.cycle()
    s2.cycle()
    assert s2.mirror.changed == 7  # the whole queue: five, one lost with the feed, one after
    assert set(s2.mirror.backlog.jobs) == set(s1.mirror.backlog.jobs)


def test_the_feed_entries_count_up_and_a_reader_gets_each_take_once(client, ns):
    beat(client, ns, "a", gpus=1)
    s1 = Scheduler(client, ns, holder="s1")
    s1.cycle()
    wanted = []
    for _ in range(3):
        wanted.append(submit(client, ns, gpus=4))  # never fits: only the submit changes it
        s1.cycle()
    entries = client.xrange(keys.jobs_feed(ns))
    ns_ = [int(f[b"n"]) for _, f in entries]
    assert ns_ == list(range(ns_[0], ns_[0] + len(entries)))
    (first_id, first), last = entries[0], entries[-1]
    pipe = client.pipeline(transaction=False)
    feed.take(pipe, ns, (first_id.decode(), int(first[b"n"])), leader=False)
    got = feed.parse(pipe.execute()[0])
    later = [i for _, f in entries[1:] for i in msgpack.unpackb(f[b"ids"], raw=True)]
    assert not got.gap and sorted(got.ids) == sorted(later)
    assert {w.encode() for w in wanted} <= set(later) | set(msgpack.unpackb(first[b"ids"], raw=True))
    assert got.cursor == (last[0].decode(), int(last[1][b"n"]))

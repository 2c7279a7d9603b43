"""The operators' view against a real server: samples, the board and metrics, all read-only
(test_board_alerts.py has the alerts)."""

from types import SimpleNamespace

import pytest

from dispatcher.views.board import Board
from dispatcher.views.capacity import capacity
from dispatcher.views.metrics import ClusterCollector, exposition
from dispatcher.core.model import GpuInfo
from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import NodeRecord, write_heartbeat
from dispatcher.store.samples import figures, read_samples, record_sample


def gpus(n, util=0.0, blocked=""):
    return tuple(GpuInfo(i, "NVIDIA A100-40GB", 40.0, util_pct=util, blocked=blocked if i == 0 else "")
                 for i in range(n))


def want(n_gpus):
    return SimpleNamespace(spec=SimpleNamespace(gpus=n_gpus, nodes=0, gpus_per_node=0, min_gpus=None, gpu_types=(),
                                                gpu_mem_gb=0.0))


def read_of(nodes, pending=(), running=()):
    return SimpleNamespace(nodes=nodes, snapshot=SimpleNamespace(pending=list(pending), running=list(running)))


def running_on(node, *gpu_lists, cpus=0, mem_gb=0.0):
    return [SimpleNamespace(node=node, gpus=tuple(g), spec=SimpleNamespace(cpus=cpus, mem_gb=mem_gb))
            for g in gpu_lists]


def test_figures_count_held_idle_blocked_and_stranded_gpus():
    t = 1_000_000
    nodes = [NodeRecord("a", gpus(4), 8, 64.0, t, {}),  # 1 free
             NodeRecord("b", gpus(4, util=50.0), 8, 64.0, t, {}),  # 3 free
             NodeRecord("c", gpus(2, blocked="zombie"), 8, 64.0, t, {}),  # GPU 0 blocked, 1 free
             NodeRecord("dead", gpus(8), 8, 64.0, t - 60_000, {})]  # not counted
    running = running_on("a", (0, 1), (2,)) + running_on("b", (0,)) + running_on("dead", (0, 1))
    f = figures(nodes, running, t, 10.0, requests=((2, (), 0.0),))
    assert (f["gpus"], f["held"], f["blocked"]) == (9, 4, 1)
    assert f["frag"] == round(2 / 5, 3)  # a's 1 and c's 1 free GPU are below the smallest request of 2; b's 3 are not
    assert f["idle"] == ["a:0", "a:1", "a:2"]  # held and under 5% (b's GPU 0 is at 50%)
    assert f["util_pct"] == round(4 * 50.0 / 10, 1)  # every GPU of a live node, blocked ones too
    assert figures(nodes, running, t, 10.0, requests=())["frag"] == 0.0  # nobody waits for a GPU


def test_free_gpus_with_no_cpu_or_memory_beside_them_are_stranded_not_free():
    t = 1_000_000
    nodes = [NodeRecord("cpu-bound", gpus(4), 8, 64.0, t, {}),  # its one job asked for every CPU
             NodeRecord("mem-bound", gpus(4), 8, 64.0, t, {}),  # ... for all but half a GB
             NodeRecord("roomy", gpus(4), 8, 64.0, t, {})]
    running = running_on("cpu-bound", (0,), cpus=8) + running_on("mem-bound", (0,), mem_gb=63.5) + \
        running_on("roomy", (0,), cpus=2, mem_gb=8.0)
    f = figures(nodes, running, t, 10.0, requests=((1, (), 0.0),))
    assert (f["free"], f["stranded"], f["frag"]) == (9, 6, round(6 / 9, 3))
    rows = capacity(nodes, running, t, 10.0)
    assert [(r["model"], r["nodes"], r["gpus"], r["free"], r["stranded"]) for r in rows] == [
        ("A100-40GB", 3, 12, 9, 6)]
    assert rows[0]["fits"] == {"1": 1, "2": 1, "4": 0, "8": 0}  # only "roomy": 3 free GPUs with room beside them


def test_a_free_gpu_is_stranded_only_for_requests_that_want_its_kind_and_could_ever_run():
    # one 8xH100 job on a cluster without an H100 showed "43% fragmentation, +6 stranded" while the capacity
    # table said 0: the smallest request counted, whatever GPUs it wants and whether it could ever run
    t = 1_000_000

    def kind(n, name, mem):
        return tuple(GpuInfo(i, name, mem) for i in range(n))

    nodes = [NodeRecord("head", kind(4, "NVIDIA A100-80GB", 80.0) + tuple(GpuInfo(4 + i, "Tesla V100-16GB", 16.0)
                                                                             for i in range(4)), 32, 256.0, t, {}),
             NodeRecord("n2", kind(2, "NVIDIA A100-40GB", 40.0), 16, 64.0, t, {}),
             NodeRecord("n3", kind(2, "NVIDIA H100-80GB", 80.0), 16, 64.0, t, {})]
    running = running_on("head", (0, 1, 2, 4, 5, 6), cpus=6)  # head: A100 3 and V100 7 free; n2 and n3: all free
    f = figures(nodes, running, t, 10.0, requests=((8, ("H100",), 0.0),))  # more H100s than there are
    assert (f["free"], f["stranded"], f["frag"]) == (6, 0, 0.0)
    f = figures(nodes, running, t, 10.0, requests=((2, ("V100",), 0.0),))  # a V100 pair: head has one free
    assert f["stranded_at"] == {("head", 7)}
    assert figures(nodes, running, t, 10.0, requests=((2, (), 0.0),))["stranded"] == 0  # any two: head's A100+V100
    f = figures(nodes, running, t, 10.0, requests=((2, ("A100",), 0.0), (2, ("V100",), 0.0)))
    assert f["stranded_at"] == {("head", 3), ("head", 7)}  # head's single A100 and V100: no pair of either there
    rows = {r["model"]: r["stranded"] for r in capacity(nodes, running, t, 10.0, stranded=f["stranded_at"])}
    assert rows == {"A100-80GB": 1, "Tesla V100-16GB": 1, "A100-40GB": 0, "H100-80GB": 0}
    f = figures(nodes, running, t, 10.0, requests=((4, ("H100",), 0.0),))  # on whole nodes: n3 is one, all free
    assert f["stranded"] == 0


def test_capacity_leaves_out_dead_and_drained_nodes_and_blocked_gpus():
    from dispatcher.store.nodes import Drain

    t = 1_000_000
    nodes = [NodeRecord("a", gpus(2, blocked="zombie"), 8, 64.0, t, {}),
             NodeRecord("dead", gpus(8), 8, 64.0, t - 60_000, {}),
             NodeRecord("drained", gpus(8), 8, 64.0, t, {}, Drain("maintenance", "ops", t))]
    (row,) = capacity(nodes, [], t, 10.0)
    assert (row["nodes"], row["gpus"], row["free"], row["fits"]["1"], row["fits"]["2"]) == (1, 1, 1, 1, 0)


def test_one_sample_per_slot_and_read_back_in_order(client, ns):
    t = 1_700_000_000_000
    node = NodeRecord("a", gpus(2), 8, 64.0, t, {})
    assert record_sample(client, ns, t, read_of([node], [want(2)], running_on("a", (0,))), 10.0, every_ms=15_000)
    assert not record_sample(client, ns, t + 5_000, read_of([node]), 10.0, every_ms=15_000)  # same slot
    node2 = NodeRecord("a", gpus(2), 8, 64.0, t + 15_000, {})
    assert record_sample(client, ns, t + 15_000, read_of([node2]), 10.0, every_ms=15_000)
    got = read_samples(client, ns)
    assert [(s["t_ms"], s["held"], s["pending"], s["running"], s["frag"], s["idle"]) for s in got] == [
        (t - t % 15_000, 1, 1, 1, 1.0, ["a:0"]), (t + 15_000 - t % 15_000, 0, 0, 0, 0.0, [])]
    assert read_samples(client, ns, t + 1) == got[1:]


def dump_all(client, ns):
    return {k: client.dump(k) for k in sorted(client.scan_iter(match=f"{ns}:*"))}


def test_the_board_summarises_pages_and_never_writes(client, ns):
    from dispatcher.scheduler.loop import Scheduler

    t = now_ms()
    specs = [build_spec(command=["true"], user=f"u{i % 3}", team="vision" if i % 2 else "", submit_ms=t - 1000 * i,
                        gpus=1 + i % 2, priority=("low", "normal", "high", "critical")[i % 4]) for i in range(130)]
    ids = write_jobs(client, ns, specs)
    sched = Scheduler(client, ns)
    sched.cycle()  # no node yet: every job waits, and the leader publishes its queue
    sched.lease.release()  # (its lease would lapse during the test: a key gone that no view took)
    client.delete(keys.scheduler_cluster(ns))  # nothing published of the nodes: the board reads them itself
    write_heartbeat(client, ns, "n1", list(gpus(2)), 8, 64.0, t)
    before = dump_all(client, ns)
    board = Board(client, ns)
    view = board.overview()
    by_class = {c["class"]: c for c in view["classes"]}
    assert [c["class"] for c in view["classes"]] == ["critical", "high", "normal", "low"]
    assert by_class["critical"]["pending"] == 32 and by_class["critical"]["oldest_job"] == ids[127]
    assert by_class["critical"]["reasons"][0]["count"] == 32  # the leader's word on each (no node at all)
    assert view["totals"]["pending"] == 130 and view["totals"]["gpus"] == 2
    assert {u["user"] for u in view["usage"]["users"]} == {"u0", "u1", "u2"}
    assert view["nodes"][0]["gpus"][0]["state"] == "free"

    page = board.queue_page("pending", "critical", page=1, per=10)
    assert (page["total"], page["pages"], len(page["jobs"])) == (32, 4, 10)
    waits = [j["wait_s"] for j in page["jobs"]]
    assert waits == sorted(waits, reverse=True) and all(j["priority"] == "critical" for j in page["jobs"])
    assert board.queue_page("pending", "", page=99, per=50)["page"] == 2  # clamped to the last page

    job = board.job(ids[0])
    assert job["job"]["id"] == ids[0] and job["timeline"][0]["what"] == "submitted" and job["log_tail"] == ""
    text = exposition(ClusterCollector(board)).decode()
    assert 'dispatch_jobs_pending{class="critical"} 32.0' in text
    assert dump_all(client, ns) == before  # read-only, endpoints and metrics included


def test_the_board_shows_the_nodes_jobs_and_ends_the_leader_published(client, ns):
    """The board reads what the leader published (store/cluster.py), not the nodes and jobs one by one:
    a node the leader has not seen yet is not on it; the idle warnings and the ends are; and with no
    fresh publication (no leader runs) it reads the cluster itself."""
    import time

    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store import cluster
    from dispatcher.store.jobs import cancel_job
    from dispatcher.store.scripts import Scripts

    scripts, t = Scripts(client, ns), now_ms()
    for name in ("n2", "n1"):
        write_heartbeat(client, ns, name, list(gpus(2)), 8, 64.0, t)
    (held,) = write_jobs(client, ns, [build_spec(command=["sleep", "9"], user="ann", submit_ms=t, gpus=2)])
    epoch = scripts.commit_placement(held, "n1", (0, 1), 0, t)
    assert scripts.mark_running(held, epoch, t, 4242) == 1
    (doomed,) = write_jobs(client, ns, [build_spec(command=["true"], user="bo", submit_ms=t, gpus=9)])
    sched = Scheduler(client, ns)
    sched.cycle()
    write_heartbeat(client, ns, "n3", list(gpus(2)), 8, 64.0, now_ms())  # after the leader's read
    assert scripts.idle_warning(held, epoch, now_ms() - 600_000, "GPUs idle: all below 5% for 5m") == 1
    view = Board(client, ns).overview()
    assert [n["name"] for n in view["nodes"]] == ["n1", "n2"]
    assert [g["job"] for g in view["nodes"][0]["gpus"]] == [held, held]
    assert view["nodes"][0]["gpus"][0]["users"] == ["ann"] and view["usage"]["users"][0]["gpus"] == 2
    assert [a["kind"] for a in view["alerts"]] == ["idle_gpu", "idle_gpu"]

    cancel_job(scripts, client, ns, doomed, now_ms(), "not wanted")
    time.sleep(cluster.PUBLISH_EVERY_MS / 1000 + 0.1)
    sched.cycle()  # sees the end, and publishes n3
    sched.lease.release()
    view = Board(client, ns).overview()
    assert [n["name"] for n in view["nodes"]] == ["n1", "n2", "n3"]
    assert view["outcomes"]["counts"]["cancelled"] == 1
    assert view["outcomes"]["reasons"] == [{"state": "cancelled", "reason": "not wanted", "count": 1}]

    cluster.publish(client, ns, now_ms() - 60_000, [], [])  # a leader that stopped a minute ago
    write_heartbeat(client, ns, "n4", list(gpus(2)), 8, 64.0, now_ms())
    view = Board(client, ns).overview()
    assert [n["name"] for n in view["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert view["nodes"][0]["gpus"][1]["job"] == held and view["nodes"][0]["gpus"][1]["idle"]


@pytest.mark.parametrize("raw", [b"\xc1", b"\x93\x01\x02\x03", b"\x94\x01\xa1x\x90\x90", b"\x94\x02\x01\x90\x90"],
                         ids=["not-msgpack", "three-parts", "time-not-a-number", "another-format"])
def test_a_publication_that_does_not_read_is_read_past(client, ns, raw):
    """A value under the published key that is not the leader's (a bad write, another version): the
    board reads the nodes itself, and shows them."""
    from dispatcher.store import cluster

    client.set(keys.scheduler_cluster(ns), raw)
    write_heartbeat(client, ns, "n1", list(gpus(2)), 8, 64.0, now_ms())
    assert cluster.read(client, ns) is None
    assert [n["name"] for n in Board(client, ns).overview()["nodes"]] == ["n1"]


def test_a_running_job_whose_record_msgpack_cannot_pack_is_left_out_of_the_publication(client, ns):
    """A running job's record with an int past 64 bits (garbage in its started time) does not stop the
    leader's publication: the other jobs and every node are published, that job is left out."""
    from types import SimpleNamespace

    from dispatcher.store import cluster
    from dispatcher.store.nodes import read_nodes

    spec = build_spec(command=["true"], user="ann", submit_ms=now_ms(), gpus=1)
    good = SimpleNamespace(spec=spec, node="n1", gpus=(0,), started_ms=now_ms(), stopping=False, rank=0)
    bad = SimpleNamespace(spec=spec, node="n1", gpus=(1,), started_ms=2 ** 70, stopping=False, rank=0)
    write_heartbeat(client, ns, "n1", list(gpus(2)), 8, 64.0, now_ms())
    nodes, _ = read_nodes(client, ns)
    pipe = client.pipeline(transaction=False)
    cluster.publish(pipe, ns, now_ms(), nodes, [good, bad])
    pipe.execute()
    seen = cluster.read(client, ns)
    assert [n.name for n in seen.nodes] == ["n1"] and [r.gpus for r in seen.running] == [(0,)]


def test_a_jobs_page_shows_the_last_lines_of_its_output_whole(client, ns):
    from dispatcher.store.jobs import append_log
    from dispatcher.views.board import LOG_TAIL_LINES

    (job,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=1)])
    text = b"".join(b"step %d\n" % i for i in range(1000))
    for at in range(0, len(text), 3):  # more chunks than lines shown, each cutting lines anywhere
        append_log(client, ns, job, text[at:at + 3])
    shown = Board(client, ns).job(job)["log_tail"].splitlines()
    assert shown == [f"step {i}" for i in range(1000 - LOG_TAIL_LINES, 1000)]


def publish_state(client, ns, holder: str, running: dict) -> int:
    """What a leader publishes after a cycle (its figures, the nodes and the running jobs) as `holder`,
    with `running` ({job id: GPU of n1}) on n1's two GPUs; its time."""
    from dispatcher.store import cluster, stats

    t = now_ms()
    rows = [SimpleNamespace(spec=spec, node="n1", gpus=(gpu,), started_ms=t - 5000, stopping=False, rank=0)
            for spec, gpu in running.items()]
    pipe = client.pipeline(transaction=False)
    stats.publish(pipe, ns, {"holder": holder, "at_ms": t, "cycles": 1, "placed": len(rows), "cycle_ms": 2.0})
    cluster.publish(pipe, ns, t, [NodeRecord("n1", gpus(2), 8, 64.0, t, {})], rows)
    pipe.execute()
    return t


def test_every_view_answers_from_a_read_at_most_a_second_before_the_request(client, ns):
    """Issue "operators' view stays true": the board served its last read while the next one ran in
    the background, at two levels, so /metrics and /api/board showed the request before last (a
    scrape every 15 s: the cluster 30-45 s ago). Now, past the bound, a request waits for a new read:
    after a change and a second's wait, the first request of each view shows the change."""
    import json
    import time
    from dataclasses import replace

    from dispatcher.views.dashboard import create_app
    from dispatcher.views.top_screen import gather

    specs = [build_spec(command=["sleep", "60"], user=u, submit_ms=now_ms(), gpus=1) for u in ("ann", "bo")]
    ann, bo = (replace(s, id=j) for s, j in zip(specs, write_jobs(client, ns, specs)))
    publish_state(client, ns, "sched-a", {ann: 0})
    board = Board(client, ns)
    app = create_app(board).test_client()
    for view in (board.overview(), json.loads(app.get("/api/board").data)):  # state A, read and served
        assert view["scheduler"]["holder"] == "sched-a" and view["nodes"][0]["gpus"][0]["job"] == ann.id
    assert 'dispatch_gpu_allocated{gpu="0",node="n1"} 1.0' in app.get("/metrics").data.decode()

    def allocated(text):
        return [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith("dispatch_gpu_allocated{")]

    # state B: ann's job ended (cancelled), bo's runs on GPU 1, and another scheduler leads
    published_at = publish_state(client, ns, "sched-b", {bo: 1})
    time.sleep(1.2)  # past the bound
    text = app.get("/metrics").data.decode()  # one scrape
    assert allocated(text) == ["0.0", "1.0"], text
    age = float(text.split("\ndispatch_scheduler_stats_age_seconds ")[1].split()[0])
    assert 1.0 <= age < 2.5 and age == pytest.approx((now_ms() - published_at) / 1000, abs=0.3)

    publish_state(client, ns, "sched-c", {})  # every job ended
    time.sleep(1.2)
    shown = json.loads(app.get("/api/board").data)  # one poll of the page
    assert shown["scheduler"]["holder"] == "sched-c" and shown["totals"]["running"] == 0
    assert [g["job"] for g in shown["nodes"][0]["gpus"]] == [None, None]
    assert shown["scheduler"]["age_s"] < 2.5  # the page's "as of" is the leader's last publication

    publish_state(client, ns, "sched-d", {ann: 0, bo: 1})
    time.sleep(1.2)
    frame = gather(board)  # one frame of `dispatch top`
    assert frame["overview"]["scheduler"]["holder"] == "sched-d"
    assert sorted(j["id"] for j in frame["running"]["jobs"]) == sorted([ann.id, bo.id])


def test_requests_past_the_bound_share_one_read(client, ns):
    import gzip
    import json
    import threading
    import time

    publish_state(client, ns, "sched-a", {})
    board = Board(client, ns)
    board.overview_json(gzip=True)
    reads, read = [], board._read_cluster

    def counted():
        reads.append(1)
        time.sleep(0.2)  # a read of a large cluster
        return read()

    board._read_cluster = counted
    publish_state(client, ns, "sched-b", {})
    time.sleep(1.1)
    answers = []
    viewers = [threading.Thread(target=lambda gz=i % 2 == 0: answers.append(board.overview_json(gzip=gz)))
               for i in range(12)]
    for v in viewers:
        v.start()
    for v in viewers:
        v.join(10)
    holders = [json.loads(gzip.decompress(a) if a[:2] == b"\x1f\x8b" else a)["scheduler"]["holder"] for a in answers]
    assert holders == ["sched-b"] * 12 and len(reads) == 1  # nobody served the old read; one read for all
    t0 = time.perf_counter()
    board.overview_json(gzip=True)
    assert time.perf_counter() - t0 < 0.05 and len(reads) == 1  # within the bound: the read's answer again


def test_every_api_endpoint_answers_bad_input_and_unknown_paths_with_a_json_error(client, ns):
    """QA: ?hours=nan was a 500 HTML page with a traceback; /api/queue and /api/search clamped a bad
    page or per silently (200) where /api/finished said 400; an unknown /api/ path was Flask's HTML
    404; cancelling an ended job answered {"outcome": "succeeded"} as if it had just been done."""
    from dispatcher.views.dashboard import create_app

    app = create_app(Board(client, ns), allow_cancel=True).test_client()
    for url in ("/api/history?hours=nan", "/api/history?hours=-nan", "/api/history?hours=inf",
                "/api/history?hours=1e999", "/api/history?hours=abc", "/api/history?hours=-1"):
        r = app.get(url)
        assert r.status_code == 400 and "hours" in r.json["error"], url
    for endpoint in ("/api/queue", "/api/search", "/api/finished"):
        for bad in ("page=-5", "page=abc", "page=nan", "page=99999999999", "per=-1", "per=0", "per=100000",
                    "per=1e3"):
            r = app.get(f"{endpoint}?{bad}")
            assert r.status_code == 400 and "page is 0 to" in r.json["error"], (endpoint, bad)
        assert app.get(f"{endpoint}?page=0&per=5").status_code == 200
    assert app.get("/api/history?hours=6").status_code == 200
    for path in ("/api/nothing", "/api/job/", "/api/node/"):
        r = app.get(path)
        assert r.status_code == 404 and r.is_json and "no such endpoint" in r.json["error"], path
    for path in ("/api/job/12/cancel", "/api/job/12/requeue"):
        r = app.get(path)  # a wrong method: was Flask's HTML 405 page
        assert r.status_code == 405 and r.is_json and "use POST" in r.json["error"], path

    token = {"X-Dispatch-CSRF": app.get("/api/config").json["csrf"]}
    assert app.post("/api/job/999999/cancel", headers=token, json={}).status_code == 404
    client.hset(keys.auth(ns), "mode", "hmac")  # identity on: the scheduler's answer was a 400
    assert app.post("/api/job/999999/cancel", headers=token, json={}).status_code == 404
    client.hdel(keys.auth(ns), "mode")
    [job] = write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=now_ms(), gpus=1)])
    assert app.post(f"/api/job/{job}/cancel", headers=token, json={}).json == {"outcome": "cancelled"}
    again = app.post(f"/api/job/{job}/cancel", headers=token, json={})
    assert again.status_code == 200 and again.json == {"outcome": "already cancelled"}


def test_every_pending_job_is_in_one_class_row_and_one_user_row_held_ones_too(client, ns):
    """A job held by `dispatch hold` and one waiting on its dependency are pending: the total, the class
    rows, the user rows, the GPUs asked and dispatch_jobs_pending all count them, as `dispatch queue`
    does, with the held ones broken out (their column, dispatch_jobs_held). (They were in the total
    only, or the class rows only: 12, 11 and 10 for one queue.)"""
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store.pending import hold_job
    from dispatcher.store.scripts import Scripts

    t = now_ms()
    first, = write_jobs(client, ns, [build_spec(command=["true"], user="carol", gpus=4, submit_ms=t)])
    after_first, on_hold, low = write_jobs(client, ns, [
        build_spec(command=["true"], user="carol", gpus=2, after=(first,), submit_ms=t),
        build_spec(command=["true"], user="carol", gpus=4, submit_ms=t),
        build_spec(command=["true"], user="bob", gpus=2, priority="low", submit_ms=t)])
    scripts = Scripts(client, ns)
    hold_job(scripts, client, ns, on_hold, "hold", "carol", t)  # before the leader's first (whole) read
    sched = Scheduler(client, ns)

    def counts():
        sched.cycle()  # no node: nothing starts, and the leader publishes its queue
        view = Board(client, ns, ttl_s=0).overview()
        classes = {c["class"]: (c["pending"], c["held"], c["gpus_pending"]) for c in view["classes"] if c["pending"]}
        users = {u["user"]: (u["pending"], u["gpus_pending"]) for u in view["usage"]["users"]}
        text = exposition(ClusterCollector(Board(client, ns, ttl_s=0))).decode()
        assert view["totals"]["pending"] == client.zcard(keys.jobs_pending(ns)) == 4
        assert sum(n for n, _, _ in classes.values()) == sum(n for n, _ in users.values()) == 4, (classes, users)
        assert sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("dispatch_jobs_pending{")) == 4.0
        assert view["totals"]["jobs_held"] == sum(h for _, h, _ in classes.values())
        return classes, users

    assert counts() == ({"normal": (3, 2, 10), "low": (1, 0, 2)}, {"carol": (3, 10), "bob": (1, 2)})
    hold_job(scripts, client, ns, low, "hold", "bob", now_ms())  # seen through the change feed
    assert counts()[0] == {"normal": (3, 2, 10), "low": (1, 1, 2)}
    hold_job(scripts, client, ns, on_hold, "release", "carol", now_ms())
    assert counts()[0] == {"normal": (3, 1, 10), "low": (1, 1, 2)}
    sched.lease.release()


def test_the_page_of_a_class_lists_its_held_jobs_after_the_others_as_its_row_counts_them(client, ns):
    # the class row said 10 pending (held ones counted), its page listed 4 (held ones left out)
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store.scripts import Scripts

    t = now_ms()
    ids = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=t - 1000 * (5 - i), gpus=1,
                                             priority="low") for i in range(5)])
    scripts = Scripts(client, ns)
    for job in ids[:2]:
        assert scripts.hold(job, "hold", "u") == 1
    sched = Scheduler(client, ns)
    sched.cycle()
    sched.lease.release()
    board = Board(client, ns)
    (row,) = [c for c in board.overview()["classes"] if c["class"] == "low"]
    page = board.queue_page("pending", "low", per=50)
    assert row["pending"] == page["total"] == len(page["jobs"]) == 5, (row, page["total"])
    assert [j["id"] for j in page["jobs"]] == ids[2:] + ids[:2]  # the held ones last, oldest first

"""The dashboard's search, a node's page and the fair-share history, against a real server: read-only,
bounded, and what they find."""

from types import SimpleNamespace

import pytest

from dispatcher.clock import now_ms
from dispatcher.core.errors import InvalidRequestError, NotFoundError
from dispatcher.core.model import GpuInfo
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import drain, write_heartbeat
from dispatcher.store.samples import OTHERS, held_by, read_samples, record_sample
from dispatcher.store.scripts import Scripts
from dispatcher.views.node import holders_of, node_view
from dispatcher.views.search import Search, conditions


def dump_all(client, ns):
    return {k: client.dump(k) for k in sorted(client.scan_iter(match=f"{ns}:*"))}


@pytest.fixture
def jobs(client, ns):
    t = now_ms()
    rows = [("alice", "vision", "sweep-a", "high"), ("alice", "vision", "train-big", "normal"),
            ("bob", "nlp", "sweep-b", "low"), ("carol", "", "eval", "critical")] * 5
    specs = [build_spec(command=["true"], user=u, team=team, name=f"{name}-{i}", priority=p, gpus=1,
                        submit_ms=t - 1000 * (20 - i)) for i, (u, team, name, p) in enumerate(rows)]
    return write_jobs(client, ns, specs)


def test_search_by_id_user_team_and_name_with_state_and_class_filters(client, ns, jobs):
    scripts, t = Scripts(client, ns), now_ms()
    write_heartbeat(client, ns, "n1", [GpuInfo(0, "NVIDIA A100-80GB", 80.0)], 8, 64.0, t)
    epoch = scripts.commit_placement(jobs[0], "n1", (0,), 0, t)
    assert scripts.mark_running(jobs[0], epoch, t, 4242) == 1
    before = dump_all(client, ns)
    s = Search(client, ns)

    assert [j["id"] for j in s.find(jobs[7])["jobs"]] == [jobs[7]]
    alice = s.find("alice", per=100)
    assert alice["total"] == 10 and {j["user"] for j in alice["jobs"]} == {"alice"}
    assert alice["jobs"][0]["id"] == jobs[0] and alice["jobs"][0]["state"] == "running"  # active first
    assert alice["jobs"][0]["node"] == "n1" and alice["jobs"][0]["run_s"] is not None
    assert alice["words"] == "searched all 20 jobs" and alice["searched"] == 20
    assert {j["user"] for j in s.find("team:nlp")["jobs"]} == {"bob"}
    assert s.find("sweep", per=100)["total"] == 10  # a substring of the name
    assert s.find("name:sweep-?-1*", per=100)["total"] == 5  # a glob: sweep-a-12, sweep-b-10, ...
    assert s.find("alice sweep", per=100)["total"] == 5  # every word must hold
    assert s.find("alice", state="running")["total"] == 1
    assert s.find("alice", state="pending")["total"] == 9
    assert s.find("alice", cls="normal")["total"] == 5
    page = s.find("sweep", page=1, per=4)
    assert (page["page"], page["pages"], len(page["jobs"])) == (1, 3, 4)
    assert s.find("nobody")["total"] == 0 and s.find("")["jobs"] == []
    with pytest.raises(InvalidRequestError):
        s.find("alice", state="sleeping")
    with pytest.raises(InvalidRequestError):
        s.find("alice", cls="urgent")
    assert dump_all(client, ns) == before  # read-only


def test_a_search_looks_at_the_newest_jobs_only_and_says_so_but_finds_any_id(client, ns, jobs):
    s = Search(client, ns, searched=8)
    found = s.find("alice", per=100)
    assert found["searched"] == 8 and found["words"] == "searched the newest 8 of 20 jobs and every active one"
    assert {j["id"] for j in found["jobs"]} <= set(jobs[12:])
    by_id = s.find(jobs[0])  # an old job, by its id: looked up, no scan
    assert [j["id"] for j in by_id["jobs"]] == [jobs[0]] and by_id["words"] == "looked up by id"
    assert by_id["searched"] == 1


def test_an_answer_is_kept_a_few_seconds_per_query(client, ns, jobs):
    s = Search(client, ns, cache_s=60)
    assert s.find("carol")["total"] == 5
    write_jobs(client, ns, [build_spec(command=["true"], user="carol", submit_ms=now_ms())])
    assert s.find("carol")["total"] == 5  # the same query: the kept answer
    assert s.find("user:carol")["total"] == 6  # another query reads again
    assert Search(client, ns, cache_s=0).find("carol")["total"] == 6


def test_an_array_element_is_found_by_its_name(client, ns):
    from dispatcher.core.arrays import NEW

    t = now_ms()
    specs = [build_spec(command=["true"], user="ann", submit_ms=t, name="arr").filled(
        array_of=f"{NEW}0", array_index=i, array_count=3) for i in range(3)]
    ids = write_jobs(client, ns, specs)
    s = Search(client, ns)
    assert [j["id"] for j in s.find(f"{ids[0]}_2")["jobs"]] == [ids[2]]
    assert s.find(f"{ids[0]}_2")["jobs"][0]["label"] == f"{ids[0]}_2"
    assert {j["id"] for j in s.find(f"id:{ids[0]}")["jobs"]} == set(ids)  # the array: every element


def test_query_words_and_prefixes():
    assert conditions("12_3") == [["12_3"]]  # a bare id is the id (name:12 for a name)
    (alts,) = conditions("ali")
    assert [a.users for a in alts[:1]] == [("ali",)] and alts[2].names == ("*ali*",)
    (alts,) = conditions("user:bob")
    assert len(alts) == 1 and alts[0].users == ("bob",)
    (alts,) = conditions("name:x*")
    assert alts[0].names == ("x*",)
    assert conditions("") == []


def test_a_node_page_reads_one_node(client, ns, jobs):
    scripts, t = Scripts(client, ns), now_ms()
    gpus = [GpuInfo(0, "NVIDIA A100-80GB", 80.0, util_pct=40.0), GpuInfo(1, "NVIDIA A100-80GB", 80.0,
                                                                         blocked="pid 99 (python)")]
    write_heartbeat(client, ns, "n1", gpus, 16, 128.0, t)
    write_heartbeat(client, ns, "n2", [GpuInfo(0, "NVIDIA T4", 16.0)], 4, 16.0, t - 120_000)
    epoch = scripts.commit_placement(jobs[0], "n1", (0,), 0, t)
    assert scripts.mark_running(jobs[0], epoch, t, 4242) == 1
    drain(client, ns, "n1", "new cables", "ops", t)
    before = dump_all(client, ns)
    v = node_view(client, ns, "n1", 10.0)
    assert v["alive"] and v["drain"]["reason"] == "new cables" and v["cpus"] == 16
    assert [g["state"] for g in v["gpus"]] == ["held", "blocked"]
    assert v["gpus"][0]["jobs"] == [jobs[0]] and v["gpus"][0]["users"] == ["alice"]
    assert v["gpus"][1]["blocked"] == "pid 99 (python)"
    assert [(j["id"], j["gpus"], j["state"]) for j in v["jobs"]] == [(jobs[0], [0], "running")]
    # a job holding no GPU there (CPUs only) is on the page and in its CPUs: it was missing from both
    (cpu_only,) = write_jobs(client, ns, [build_spec(command=["true"], user="bob", gpus=0, cpus=3, submit_ms=t)])
    assert scripts.mark_running(cpu_only, scripts.commit_placement(cpu_only, "n1", (), 0, t), t, 4243) == 1
    before = dump_all(client, ns)
    v = node_view(client, ns, "n1", 10.0)
    assert [(j["id"], j["gpus"]) for j in v["jobs"]] == [(jobs[0], [0]), (cpu_only, [])]
    assert v["cpus_used"] == 4 and [g["state"] for g in v["gpus"]] == ["held", "blocked"]
    dead = node_view(client, ns, "n2", 10.0)
    assert not dead["alive"] and dead["seen_s_ago"] >= 119 and dead["gpus"][0]["state"] == "dead"
    with pytest.raises(NotFoundError):
        node_view(client, ns, "n9", 10.0)
    assert dump_all(client, ns) == before
    assert holders_of({0: "7", 1: "~8,9"}) == {0: ["7"], 1: ["8", "9"]}


def running(user, team, n):
    return SimpleNamespace(node="n1", gpus=tuple(range(n)), spec=SimpleNamespace(user=user, team=team, cpus=1,
                                                                                 mem_gb=1.0))


def test_samples_carry_gpus_held_per_team_and_user_the_few_largest_named(client, ns):
    jobs = [running(f"u{i:02d}", "vision" if i % 2 else "nlp", 1 + i % 3) for i in range(25)]
    teams, users = held_by(jobs, top=20)
    assert teams == {"vision": sum(len(j.gpus) for j in jobs[1::2]), "nlp": sum(len(j.gpus) for j in jobs[::2])}
    assert len(users) == 21 and sum(users.values()) == sum(teams.values()) and users[OTHERS] == 5
    node = SimpleNamespace(name="n1", gpus=tuple(GpuInfo(i, "A100", 80.0) for i in range(60)), cpus=64, mem_gb=512.0,
                           alive=lambda now, timeout: True, drain=None)
    read = SimpleNamespace(nodes=[node], snapshot=SimpleNamespace(pending=[], running=jobs))
    t = now_ms() - 30_000
    client.xadd(keys.samples(ns), {"v": 1, "gpus": 8, "held": 2, "blocked": 0, "util_pct": 1.0, "frag": 0.0,
                                   "pending": 0, "running": 1, "idle_n": 0, "idle": ""}, id=f"{t - 15_000}-0")
    assert record_sample(client, ns, t, read, 10.0)
    old, new = read_samples(client, ns)
    assert old["teams"] == {} and old["users"] == {}  # a sample from before: it still reads
    assert new["teams"] == teams and new["users"] == users
    assert sum(len(k) + len(v) for k, v in client.xrange(keys.samples(ns))[-1][1].items()) < 1000  # small


def test_a_drained_nodes_free_gpus_are_neither_usable_nor_free_and_its_held_ones_count_held():
    from dispatcher.store.nodes import Drain
    from dispatcher.store.samples import figures

    def node(name, drained):
        return SimpleNamespace(name=name, gpus=tuple(GpuInfo(i, "A100", 80.0) for i in range(4)), cpus=64,
                               mem_gb=512.0, alive=lambda now, timeout: True,
                               drain=Drain("disk swap", "root", 1) if drained else None)
    job = running("ana", "nlp", 1)  # on n1 GPU 0
    got = figures([node("n1", True), node("n2", False)], [job], now_ms(), 10.0, ((1, (), 0.0),))
    assert (got["gpus"], got["held"], got["free"], got["stranded"]) == (5, 1, 4, 0), got  # n1's 3 free: not usable
    from dispatcher.views.alerts import AlertConfig, evaluate

    dead = {"classes": [], "nodes": [{"name": "n1", "alive": False, "seen_s_ago": 60, "gpus": [],
                                      "drain": {"reason": "disk swap", "by": "root"}}]}
    (alert,) = evaluate(dead, {}, [], AlertConfig(), now_ms())  # drained, then powered off: maintenance
    assert (alert["kind"], alert["severity"]) == ("dead_node", "warning") and "(drained: disk swap)" in alert["message"]


def test_nodes_shows_no_free_gpu_on_a_dead_or_drained_node(client, ns, cli):
    t = now_ms()
    for name, seen in (("up1", t), ("gone", t - 120_000), ("kept", t)):
        write_heartbeat(client, ns, name, [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(2)], 8, 64.0, seen)
    drain(client, ns, "kept", "disk swap", "root", t)
    rows = {line.split()[0]: line.split() for line in cli.run("nodes").stdout.splitlines()[1:4]}
    assert (rows["up1"][2], rows["gone"][2], rows["kept"][2]) == ("2/2", "0/2", "0/2"), rows

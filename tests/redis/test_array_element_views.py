"""An array's element is named `12_5` by `queue`, search and every command; the views of one job name
it so too, and take that name: `why`, `eta`, the dashboard's job page and its cancel. (They answered
"job 14", the element's record id that appears nowhere in `queue`, and the dashboard said 404.)"""

import pytest

from dispatcher.clock import now_ms
from dispatcher.core.arrays import NEW
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.views.board import Board
from dispatcher.views.dashboard import create_app
from dispatcher.views.explain import heading, recorded
from dispatcher.views.forecast import describe, read_eta


def array(client, ns, n=3):
    t = now_ms()
    return write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=t, name="arr", gpus=1).filled(
        array_of=f"{NEW}0", array_index=i, array_count=n) for i in range(n)])


def test_the_views_of_one_job_name_an_element_as_queue_does_and_take_that_name(client, ns):
    head, second, third = array(client, ns)
    assert int(second) == int(head) + 1  # the record id of element 1, which no list shows

    assert describe(read_eta(client, ns, second)).startswith(f"job {head}_1: ")
    assert heading(recorded(client, ns, second)["job"], f"{head}_1").startswith(f"job {head}_1 (arr, ann, normal)")
    page = Board(client, ns).job(f"{head}_2")
    assert (page["job"]["id"], page["label"]) == (third, f"{head}_2")

    app = create_app(Board(client, ns), allow_cancel=True).test_client()
    got = app.get(f"/api/job/{head}_1")
    assert got.status_code == 200 and got.json["job"]["id"] == second and got.json["label"] == f"{head}_1"
    missing = app.get(f"/api/job/{head}_7")
    assert missing.status_code == 404 and f"{head}_7" in missing.json["error"]
    token = {"X-Dispatch-CSRF": app.get("/api/config").json["csrf"]}
    done = app.post(f"/api/job/{head}_1/cancel", headers=token, json={})
    assert done.status_code == 200 and done.json == {"outcome": "cancelled"}, done.json
    assert [read_job(client, ns, j)["state"] for j in (head, second, third)] == ["pending", "cancelled", "pending"]


def test_why_an_arrays_id_says_which_element_answers_and_how_many_others_there_are(client, ns):
    head, *_ = array(client, ns, 6)
    said = heading(recorded(client, ns, head)["job"], head)
    assert said.startswith(f"job {head}_0 (arr, ann, normal): pending\n"), said
    assert f"job {head} is an array of 6 jobs: this is its element {head}_0" in said and "the 5 others" in said
    assert "\n" not in heading(recorded(client, ns, head)["job"], f"{head}_0")  # named as the element: no note


def test_an_id_of_other_digits_names_no_job_in_the_dashboard_and_the_cli_alike(client, ns):
    # '²' passed str.isdigit and then failed int(): an internal error in the CLI, a 500 from /api/job/²; a
    # 5,000-digit id failed int()'s limit; '١' (Arabic-Indic 1) showed job 1 but `cancel ١` said no such job
    from urllib.parse import quote

    from dispatcher.core.errors import JobNotFound
    from dispatcher.store.jobs import read_named

    head, _, _ = array(client, ns)
    app = create_app(Board(client, ns), allow_cancel=True).test_client()
    for bad in ("²", "①", "١", "１", f"{head}_²", "9" * 5000):
        got = app.get(f"/api/job/{quote(bad)}")
        assert got.status_code == 404 and got.is_json, (bad, got.status_code)
        with pytest.raises(JobNotFound):  # (cancel, hold, release: an id that cannot name a job, one line)
            read_named(client, ns, [bad], missing=[])


def test_nodes_names_the_elements_holding_its_gpus_as_queue_does(cli, client):
    # HELD BY said 0:33,1:34 (record ids no list shows) where queue said 33_0 and 33_1
    from dispatcher.core.model import GpuInfo
    from dispatcher.store.nodes import write_heartbeat
    from dispatcher.store.scripts import Scripts

    head, second, _ = array(client, cli.ns)
    write_heartbeat(client, cli.ns, "n1", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(2)], 8, 64.0, now_ms())
    scripts = Scripts(client, cli.ns)
    for gpu, job in enumerate((head, second)):
        assert scripts.commit_placement(job, "n1", (gpu,), 0, now_ms()) > 0
    (row,) = [line for line in cli.run("nodes").stdout.splitlines() if line.startswith("n1 ")]
    assert row.split()[-1] == f"0:{head}_0,1:{head}_1", row


def test_why_of_a_running_gang_names_every_rank_where_it_runs():
    # `why` of a running gang said "running on n1 GPUs [0, 1]": rank 0 only, while show listed every rank
    job = {"id": "7", "name": "ddp", "user": "ann", "priority": "normal", "state": "running", "node": "n1",
           "gpus": [0, 1], "ranks": [["n1", [0, 1]], ["n2", [0, 1]]], "array_of": "", "array_index": None,
           "array_count": 0}
    assert heading(job, "7") == "job 7 (ddp, ann, normal): running on n1 GPUs [0, 1] and n2 GPUs [0, 1]"
    one = {**job, "ranks": []}
    assert heading(one, "7") == "job 7 (ddp, ann, normal): running on n1 GPUs [0, 1]"


def test_eta_names_the_elements_a_job_waits_for_as_queue_does(client, ns):
    # `eta 301_10` said "when job 309 ends" and `why` "reservation: job 302 holds n4 GPUs [1]": record ids
    from dispatcher.core.model import GpuInfo
    from dispatcher.store.nodes import write_heartbeat
    from dispatcher.store.scripts import Scripts

    t = now_ms()
    head, second = write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=t, gpus=1, est="10m").filled(
        array_of=f"{NEW}0", array_index=i, array_count=2) for i in range(2)])
    write_heartbeat(client, ns, "n1", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(2)], 8, 64.0, now_ms())
    scripts = Scripts(client, ns)
    for gpu, job in enumerate((head, second)):
        assert scripts.commit_placement(job, "n1", (gpu,), 0, now_ms()) > 0
    (waiting,) = write_jobs(client, ns, [build_spec(command=["true"], user="bo", submit_ms=t + 1, gpus=2)])
    said = describe(read_eta(client, ns, waiting))
    import re
    named = re.search(r"when jobs? (.*) ends?$", said)  # (one or both: they end within a millisecond or two)
    assert named and set(named.group(1).split(", ")) <= {f"{head}_0", f"{head}_1"}, said


def test_eta_names_a_pending_element_it_waits_for_as_queue_does(client, ns):
    # `eta 397_4` said "when job 399 ends": 397_2, still pending, starts and ends first in the forecast
    from dispatcher.core.model import GpuInfo
    from dispatcher.store.nodes import write_heartbeat

    write_heartbeat(client, ns, "n1", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms())
    t = now_ms()
    head, second = write_jobs(client, ns, [build_spec(command=["true"], user="ann", submit_ms=t, gpus=1, est="2m").filled(
        array_of=f"{NEW}0", array_index=i, array_count=2) for i in range(2)])
    said = describe(read_eta(client, ns, second))
    assert said.startswith(f"job {head}_1: ") and f"when job {head}_0 ends" in said, said

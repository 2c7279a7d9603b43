"""The Python API against a real server."""

import pytest

from dispatcher.api import Client
from dispatcher.core.errors import InvalidRequestError
from dispatcher.store import keys


def test_submit_and_show_through_the_python_api(redis_url, ns):
    c = Client(redis_url, ns)
    job = c.submit(["python", "train.py"], gpus=2, gpu_type="A100", priority="high", est="2h", gpu_mem=30)
    shown = c.show(job)
    assert (shown["state"], shown["gpus_requested"], shown["gpu_types"], shown["est_s"], shown["gpu_mem_gb"]) == (
        "pending", 2, ["A100"], 7200.0, 30.0)


def test_submit_many_writes_all_or_nothing(redis_url, ns, client):
    c = Client(redis_url, ns)
    ids = c.submit_many([{"command": ["true"], "gpus": i % 2} for i in range(50)])
    assert len(ids) == 50 and len(set(ids)) == 50
    with pytest.raises(InvalidRequestError):
        c.submit_many([{"command": ["true"]}, {"command": ["true"], "priority": "urgent"}])
    assert client.zcard(f"{ns}:jobs:all") == 50


def test_a_sweep_larger_than_the_submit_scripts_chunks_is_written_whole(redis_url, ns, client):
    c = Client(redis_url, ns)
    n = 11_000  # three calls of submit.lua (5,000 jobs each), each adding to the indexes 2,000 at a time
    sweep = [{"command": ["python", "train.py", "--lr", str(i / 1000)], "name": f"lr-{i}", "gpus": 1 + i % 2}
             for i in range(n)]
    ids = c.submit_many(sweep)
    assert len(set(ids)) == n and ids == [str(int(ids[0]) + i) for i in range(n)]
    assert client.zcard(keys.jobs_all(ns)) == client.zcard(keys.jobs_pending(ns)) == n
    assert client.scard(keys.jobs_changed(ns)) == n
    for i in (0, 4_999, 5_000, n - 1):
        job = c.show(ids[i])
        assert (job["name"], job["command"][-1], job["gpus_requested"], job["state"]) == (
            f"lr-{i}", str(i / 1000), 1 + i % 2, "pending")


def test_wait_times_out_on_a_job_that_cannot_run(redis_url, ns):
    c = Client(redis_url, ns)
    job = c.submit(["true"])
    with pytest.raises(TimeoutError):
        c.wait([job], timeout_s=0.3)
    assert c.cancel(job) == "cancelled" and c.wait([job]) == {job: "cancelled"}

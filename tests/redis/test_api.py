"""The Python API against a real server."""

import pytest

from dispatcher.api import Client
from dispatcher.errors import InvalidRequestError


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


def test_wait_times_out_on_a_job_that_cannot_run(redis_url, ns):
    c = Client(redis_url, ns)
    job = c.submit(["true"])
    with pytest.raises(TimeoutError):
        c.wait([job], timeout_s=0.3)
    assert c.cancel(job) == "cancelled" and c.wait([job]) == {job: "cancelled"}

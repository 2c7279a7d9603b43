"""`dispatch why` and `dispatch eta` count a node as live by the scheduler's node timeout,
DISPATCH_NODE_TIMEOUT_S (Timing.from_env), not by the built-in default of 10 s."""

import pytest

from dispatcher.clock import now_ms
from dispatcher.core.model import GpuInfo
from dispatcher.store.nodes import write_heartbeat
from dispatcher.views.explain import explain
from dispatcher.views.forecast import read_eta
from tests.redis.test_store import submit


@pytest.mark.parametrize("timeout_s,beat_s_ago,live", [("10", 20, False), ("60", 20, True), ("5", 7, False)],
                         ids=["20s-old-beat-past-10s", "20s-old-beat-within-60s", "7s-old-beat-past-5s"])
def test_why_and_eta_judge_a_node_by_dispatch_node_timeout_s(client, ns, monkeypatch, timeout_s, beat_s_ago, live):
    monkeypatch.setenv("DISPATCH_NODE_TIMEOUT_S", timeout_s)
    write_heartbeat(client, ns, "n1", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms() - beat_s_ago * 1000)
    job = submit(client, ns, gpus=1)

    why = explain(client, ns, job)
    assert why["live_nodes"] == int(live)
    assert (why["outcome"]["code"] == "would_start") is live

    eta = read_eta(client, ns, job)
    if live:
        assert eta["start"]["node"] == "n1" and eta["start"]["in_s"] <= 0
    else:
        assert eta["start"]["at"] is None  # no live node: not within the horizon

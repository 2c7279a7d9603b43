"""Standby schedulers on a long queue: 100,000 pending jobs, real processes.

A new leader's first read of that queue takes seconds (at 100,000 realistic jobs longer than the
default 5 s lease; here the lease is 1 s, so the read outlasts it several times over). The lease
is renewed from a side thread, so the leader keeps it through the read, its first commit takes,
and the standbys never take over: with one, two or three schedulers the free GPUs fill in the
leader's first cycle, under one fencing token, with no placement refused.
"""

import random
import time

import pytest

from dispatcher.core.model import PRIORITIES, GpuInfo
from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import write_heartbeat

pytestmark = pytest.mark.slow

PENDING = 100_000
NODES, GPUS = 10, 8
LEASE_S = 1.0
#: Fake nodes heartbeat once, here: none may be declared dead during the test.
ENV = {"DISPATCH_NODE_TIMEOUT_S": "3600", "DISPATCH_LEASE_S": str(LEASE_S)}


def long_queue(client, ns) -> None:
    rng = random.Random(16)
    now = now_ms()
    templates = [build_spec(command=["python", "train.py"], user=f"u{u:02d}", submit_ms=now, gpus=rng.choice((1, 2, 4)),
                            priority=rng.choice(PRIORITIES), est=rng.choice((None, 600, 3600)))
                 for u in range(20) for _ in range(5)]
    specs = [templates[i % len(templates)] for i in range(PENDING)]
    for i in range(0, PENDING, 5_000):
        write_jobs(client, ns, specs[i:i + 5_000])
    for n in range(NODES):
        write_heartbeat(client, ns, f"n{n}", [GpuInfo(g, "NVIDIA A100-80GB", 80.0) for g in range(GPUS)], 64, 512.0,
                        now_ms())


@pytest.mark.parametrize("schedulers", [1, 3])
def test_schedulers_on_a_long_queue_fill_the_cluster_in_the_first_cycle_under_one_token(cli, client, schedulers):
    long_queue(client, cli.ns)
    t0 = time.monotonic()
    for i in range(schedulers):
        cli.start("scheduler", log_name=f"scheduler-{i}", **ENV)

    def held():
        return sum(client.hlen(keys.node_alloc(cli.ns, f"n{n}")) for n in range(NODES))

    cli.wait_for(lambda: held() == NODES * GPUS, 240, "every GPU held")
    filled_s = time.monotonic() - t0
    assert filled_s > 2 * LEASE_S, f"filled in {filled_s:.1f}s: the read did not outlast the lease"
    time.sleep(3 * LEASE_S)  # three lease TTLs more: a standby that could take over would have by now
    assert int(client.get(keys.scheduler_token(cli.ns))) == 1, "the lease changed hands"
    logs = "".join(p.read_text() for p in cli.home.glob("scheduler-*.log"))
    assert logs.count("leading the scheduling") == 1, logs[-2000:]
    assert "refused" not in logs and "lost the scheduler lease" not in logs, logs[-2000:]
    print(f"{schedulers} scheduler(s): {NODES * GPUS} GPUs held {filled_s:.1f}s after start")

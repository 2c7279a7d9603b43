"""How fast the real `dispatch scheduler` process reacts to a submit on the realistic queue.

For each size a `dispatch scheduler` process (the default Timing: 1 s tick, 5 s lease; a node timeout
of a day, since the bench's nodes heartbeat only once) runs over the
realistic cluster and queue (realqueue.py) until it has published a full cycle. Then, one at a time
at random moments (0.1-1.2 s apart, so some land while a full cycle runs), jobs like the queue's
(the generator's arrivals: all classes, types, sizes) are submitted with `Client.submit`, and each is
timed from before the call to the scheduler's answer: its record shows it assigned or a verdict (why
it waits), or the leader has committed a cycle that began after the submit (a job the cycle did not
reach gets no verdict of its own: the queue's rest reason). That is the whole path users meet: the
write, the wake-up on the events channel, the quick cycle (or the full one it waits behind), the
commit.

Reports the median, p90 and p99 (nearest rank) and the max over `--samples` submits, with the share
that waited behind a full cycle (answered later than 50 ms).

    python scripts/bench/react.py [--sizes 10000x1000,100000x1000] [--samples 200] [--json F]
"""

from __future__ import annotations

import os
import random
import time

import benchlib as bl
from realqueue import Realistic, command_line


def measure(bench: bl.Bench, ns: str, size: str, nodes: int, samples: int) -> dict:
    from dispatcher.api import Client
    from dispatcher.store import keys
    from dispatcher.store import stats as published

    os.environ["DISPATCH_NODE_TIMEOUT_S"] = "86400"  # the bench's nodes heartbeat once: none may die
    proc = bench.spawn_dispatch(["scheduler"], ns, f"react-{size}")
    try:
        deadline = time.monotonic() + 600
        while not (published.read(bench.client, ns).get("at_ms") or 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the scheduler did not publish a cycle: {bench.log_tail(f'react-{size}')}")
            time.sleep(0.2)
        time.sleep(2.0)  # past its first (cold) cycle's follow-up
        client = Client(bench.url, ns)
        rng, gen = random.Random(size), Realistic(size, nodes)
        got = []
        for spec in gen.arrivals(samples, int(time.time() * 1000)):
            time.sleep(rng.uniform(0.1, 1.2))
            request = {"command": list(spec.command), "gpus": spec.gpus, "priority": spec.priority,
                       "user": spec.user, "gpu_type": ",".join(spec.gpu_types) or None,
                       "gpu_mem": spec.gpu_mem_gb or None, "est": spec.est_s}
            t0, sent_ms = time.perf_counter(), int(time.time() * 1000)
            job = client.submit(request.pop("command"), **{k: v for k, v in request.items() if v is not None})
            key, stats = keys.job(ns, job), keys.scheduler_stats(ns)
            while True:
                pipe = bench.client.pipeline(transaction=False)
                pipe.hmget(key, "state", "verdict")
                pipe.hget(stats, "at_ms")
                (state, verdict), at = pipe.execute()
                if verdict is not None or (state is not None and state != b"pending") or int(at or 0) >= sent_ms:
                    break
                if time.perf_counter() - t0 > 30:
                    raise SystemExit(f"job {job}: no answer in 30 s")
                time.sleep(0.0005)
            got.append((time.perf_counter() - t0) * 1000)
    finally:
        bench.stop([proc])
    got.sort()
    return {"samples": len(got), "react_p50_ms": bl.median(got), "react_p90_ms": bl.pct(got, 90),
            "react_p99_ms": bl.pct(got, 99), "react_max_ms": max(got),
            "behind_a_full_cycle": round(sum(1 for g in got if g > 50) / len(got), 3)}


def main() -> None:
    command_line("react", lambda bench, ns, size, nodes, args: measure(bench, ns, size, nodes, args.samples),
                 samples=200)


if __name__ == "__main__":
    main()

"""Benchmark: what identity costs a submit. Signed submits (store/requests.py: the client signs
and waits for the leader's answer; the leader checks the signature, the time, the nonce, writes the
job and seals it) against unsigned ones (Client.submit writes the job itself), in the same process,
alternately, on the same server.

The leader's side is the real RequestServer, served from a thread that wakes on the events channel
as the scheduler does. Run on its own (it needs no scheduler process):

    python scripts/bench/signed.py [--n 500] [--repeats 5] [--url URL]

It starts an embedded server when --url is not given. It prints one JSON object: per mode the
median jobs/s of sequential submits, the median and p99 latency of one submit in ms, and jobs/s of
one batch of 5,000 (submit_many: one transaction unsigned, requests of up to 1,000 specs signed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

BATCH = 5000  # a sweep's submit_many / `dispatch submit --from FILE`


def _serve(client, ns, server, stop: threading.Event) -> None:
    from dispatcher.store import keys

    sub = client.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(keys.events(ns))
    while not stop.is_set():
        if server.serve() == 0:
            sub.get_message(timeout=0.05)
    sub.close()


def measure(url: str, n: int, repeats: int) -> dict:
    from dispatcher.api import Client
    from dispatcher.auth.identity import Verifier, token_for
    from dispatcher.core.spec import build_spec
    from dispatcher.store.connect import connect
    from dispatcher.store.requests import RequestServer, submit_specs
    from dispatcher.store.jobs import write_jobs
    from dispatcher.store.scripts import Scripts

    secret = os.urandom(32)
    os.environ["DISPATCH_TOKEN"] = token_for(secret, "bench")
    client = connect(url)
    results = {"unsigned": {"rates": [], "lat": []}, "signed": {"rates": [], "lat": []}}
    for r in range(repeats):
        for mode in ("unsigned", "signed"):
            ns = f"bench-signed-{os.getpid()}-{r}-{mode}"
            stop = threading.Event()
            thread = None
            if mode == "signed":
                server = RequestServer(connect(url), ns, Verifier(secret), Scripts(client, ns))
                server.publish_mode()
                thread = threading.Thread(target=_serve, args=(connect(url), ns, server, stop), daemon=True)
                thread.start()
            api = Client(url, ns)
            lat = []
            t0 = time.perf_counter()
            for i in range(n):
                t = time.perf_counter()
                if mode == "signed":
                    spec = build_spec(command=["python", "train.py", "--lr", str(i)], user="bench",
                                      submit_ms=int(time.time() * 1000), cwd="/tmp", gpus=2, name="train", est="2h")
                    submit_specs(client, ns, [spec], "bench")
                else:
                    api.submit(command=["python", "train.py", "--lr", str(i)], gpus=2, name="train", est="2h",
                               user="bench", cwd="/tmp")
                lat.append((time.perf_counter() - t) * 1000)
            took = time.perf_counter() - t0
            results[mode]["rates"].append(n / took)
            results[mode]["lat"].extend(lat)
            specs = [build_spec(command=["python", "sweep.py", str(i)], user="bench", submit_ms=int(time.time() * 1000),
                                cwd="/tmp", gpus=1, name="sweep", est="10m") for i in range(BATCH)]
            t = time.perf_counter()
            if mode == "signed":
                ids = submit_specs(client, ns, specs, "bench")
            else:
                ids = write_jobs(client, ns, specs)
            results[mode].setdefault("batch", []).append(len(ids) / (time.perf_counter() - t))
            stop.set()
            if thread is not None:
                thread.join()
            for key in client.scan_iter(f"{ns}:*", count=1000):
                client.delete(key)
    out = {}
    for mode, got in results.items():
        lat = sorted(got["lat"])
        out[mode] = {"jobs_per_s": round(statistics.median(got["rates"]), 1),
                     "latency_ms_median": round(statistics.median(lat), 2),
                     "latency_ms_p99": round(lat[int(0.99 * (len(lat) - 1))], 2),
                     f"batch_of_{BATCH}_jobs_per_s": round(statistics.median(got["batch"]), 1)}
    out["signed_to_unsigned_rate"] = round(out["signed"]["jobs_per_s"] / out["unsigned"]["jobs_per_s"], 3)
    out.update(n=n, repeats=repeats, load=os.getloadavg()[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--url", default=None)
    args = ap.parse_args()
    if args.url:
        print(json.dumps(measure(args.url, args.n, args.repeats)))
        return
    from dispatcher.up.embedded import EmbeddedServer

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedServer(Path(tmp) / "redis", appendonly=False).start()
        try:
            print(json.dumps(measure(server.url, args.n, args.repeats)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()

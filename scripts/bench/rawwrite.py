"""The raw ceiling of submit: pipelined redis-py writes of already encoded job records, as
store.jobs.write_jobs lays them out (ids from INCRBY, a hash per job, one variadic ZADD per
index, the changed-jobs SADD, one wake-up), without MULTI and without checking anything.

Used in-process by submit.py, and as a fresh process (`python rawwrite.py URL NS FILE BATCH`,
FILE a msgpack list of [spec bytes, submit_ms]) for the ceiling of `dispatch submit --from`,
which pays its own start-up: this imports no more than it needs (redis, msgpack, the key names).
"""

from __future__ import annotations

import sys


def raw_write(client, ns: str, records: list) -> None:
    """One batch of (encoded spec, submit_ms) records."""
    from dispatcher.store import keys

    last = client.incrby(keys.job_seq(ns), len(records))
    pipe = client.pipeline(transaction=False)
    since = {}
    for i, (spec, submit_ms) in enumerate(records):
        job_id = str(last - len(records) + 1 + i)
        pipe.hset(keys.job(ns, job_id), mapping={"spec": spec, "state": "pending", "attempt": 0, "epoch": 0,
                                                 "submit_ms": submit_ms})
        since[job_id] = submit_ms
    pipe.zadd(keys.jobs_all(ns), since)
    pipe.zadd(keys.jobs_pending(ns), since)
    pipe.sadd(keys.jobs_changed(ns), *since)
    pipe.publish(keys.events(ns), b"submit")
    pipe.execute()


def main(url: str, ns: str, path: str, batch: int) -> None:
    import msgpack
    import redis

    with open(path, "rb") as f:
        records = msgpack.unpackb(f.read())
    client = redis.Redis.from_url(url)
    for i in range(0, len(records), batch):
        raw_write(client, ns, records[i:i + batch])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

"""Plain RQ, for the baselines: the job functions, and a worker process to run them.

    python scripts/bench/rqtasks.py simple|fork REDIS_URL QUEUE

runs an RQ SimpleWorker (jobs in the worker's process) or the default forking Worker
(a fork per job) on QUEUE with the JSON serializer, as dispatch's agent does, until
SIGTERM. Jobs are enqueued by name ("rqtasks.stamp"); this directory is the worker's
sys.path[0], so it imports them from here.
"""

from __future__ import annotations

import sys
import time

import benchlib as bl


def stamp(key: str) -> None:
    """Record when the job started: HSET key <job id> <time.time()>."""
    t = time.time()
    from rq import get_current_job

    job = get_current_job()
    job.connection.hset(key, job.id, repr(t))


def noop() -> None:
    return None


def command(argv: list[str]) -> None:
    """Run a command, as an RQ user runs one: a process, waited for; an error if it fails."""
    import subprocess

    subprocess.run(argv, check=True)


def first_line(key: str, argv: list[str]) -> None:
    """Run a command whose first line is a time.time(), and HSET key <job id> <that line>: when the
    job's own first instruction ran, its interpreter's start included."""
    import subprocess

    from rq import get_current_job

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    line = proc.stdout.readline().strip()
    proc.wait()
    job = get_current_job()
    job.connection.hset(key, job.id, line)


def worker(kind: str, url: str, queue_name: str) -> None:
    import redis
    from rq import Queue, SimpleWorker, Worker
    from rq.serializers import JSONSerializer

    conn = redis.Redis.from_url(url)
    queue = Queue(queue_name, connection=conn, serializer=JSONSerializer)
    cls = SimpleWorker if kind == "simple" else Worker
    cls([queue], connection=conn, serializer=JSONSerializer).work(logging_level="WARNING", with_scheduler=False)


def start(bench, ns: str, kind: str, queue_name: str, how_many: int = 1) -> list:
    """Start `how_many` workers of `kind` on the queue and wait until they are registered."""
    from rq import Queue, Worker

    procs = [bench.spawn([sys.executable, str(bl.HERE / "rqtasks.py"), kind, bench.url, queue_name], ns,
                         f"{ns}-rq-{kind}-{i}") for i in range(how_many)]
    queue = Queue(queue_name, connection=bench.client)

    def ready():
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"an RQ {kind} worker exited: {bench.log_tail(f'{ns}-rq-{kind}-0')}")
        return Worker.count(queue=queue) >= how_many

    bl.wait_until(ready, 30, 0.05, f"{how_many} RQ {kind} worker(s)")
    return procs


if __name__ == "__main__":
    worker(*sys.argv[1:4])

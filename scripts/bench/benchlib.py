"""Shared pieces of the benchmark suite (scripts/bench/run.py): the server, figures, timing.

A figure is one number the suite reports: a median over repeated runs, next to a
baseline measured in the same run on the same server, with the issue's target.
Every benchmark works in its own namespace (`bench-<name>`) and deletes only its
own keys; nothing is ever flushed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# -- numbers ----------------------------------------------------------------------------------
def median(values) -> float:
    return statistics.median(values)


def median_each(dicts: list[dict]) -> dict:
    """Key by key median of dicts with the same keys (a key missing from one counts as 0)."""
    return {k: median([d.get(k, 0.0) for d in dicts]) for k in dicts[0]} if dicts else {}


def pct(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q / 100 * len(values)) - 1))]


def timed(fn: Callable, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - t0, result


#: Run as root, the benchmarks' node agents run their jobs as root, on purpose (a root agent refuses to
#: without --run-as-user or this opt-in).
ROOT_JOBS = {"DISPATCH_ALLOW_ROOT_JOBS": "1"} if os.geteuid() == 0 else {}


def wait_until(pred: Callable, timeout_s: float = 30.0, interval_s: float = 0.01, what: str = "condition"):
    """Poll until pred() is truthy; returns its value. TimeoutError names `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(interval_s)


def log_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 1.0 is linear growth."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


def run_child(script: str, args: dict) -> dict:
    """Run `script` (in this folder) as `--child JSON` in a fresh process (its own RSS, no state of
    ours) and return the JSON object its last line prints."""
    p = subprocess.run([sys.executable, str(HERE / script), "--child", json.dumps(args)], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{script} child failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB, from /proc/self/status."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                got[line.split(":")[0]] = int(line.split()[1]) / 1024
    return got.get("VmRSS", 0.0), got.get("VmHWM", 0.0)


# -- targets and figures ----------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    desc: str
    check: Callable[[float, float | None], bool]

    def __and__(self, other: "Target") -> "Target":
        return Target(f"{self.desc} and {other.desc}",
                      lambda v, b: self.check(v, b) and other.check(v, b))


def below(limit: float, unit: str) -> Target:
    return Target(f"< {limit:g} {unit}", lambda v, b: v < limit)


def at_least(limit: float, unit: str) -> Target:
    return Target(f">= {limit:g} {unit}", lambda v, b: v >= limit)


def at_most(limit: float, unit: str = "") -> Target:
    return Target(f"<= {limit:g}{' ' + unit if unit else ''}", lambda v, b: v <= limit)


def ratio_at_most(r: float) -> Target:
    return Target(f"<= {r:g}x baseline", lambda v, b: b is not None and v <= r * b)


def ratio_at_least(r: float) -> Target:
    return Target(f">= {r:.0%} of baseline", lambda v, b: b is not None and v >= r * b)


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    baseline: float | None
    baseline_what: str
    target: Target | None = None
    repeats: int = 1
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0) or self.value is None:
            return None
        return self.value / self.baseline

    @property
    def meets_target(self) -> bool | None:
        if self.target is None or self.value is None:
            return None
        return bool(self.target.check(self.value, self.baseline))

    def as_json(self) -> dict:
        out = {"value": _round(self.value), "unit": self.unit, "baseline": _round(self.baseline),
               "baseline_what": self.baseline_what, "ratio": _round(self.ratio),
               "target": self.target.desc if self.target else None, "meets_target": self.meets_target,
               "repeats": self.repeats}
        if self.note:
            out["note"] = self.note
        if self.extra:
            out["extra"] = _round(self.extra)
        return out


def _round(x):
    """Four significant digits, through dicts and lists."""
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    if not isinstance(x, float):
        return x
    return float(f"{x:.4g}") if x else 0.0


def size_label(pending: int, nodes: int) -> str:
    def k(n):
        return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)
    return f"{k(pending)}x{k(nodes)}"


# -- round trips ------------------------------------------------------------------------------
class RoundTrips:
    """Counts what this process sends to Redis: one per command or pipeline execute (redis-py
    sends a whole pipeline in one write). Installed by patching redis-py, in the bench only."""

    def __init__(self):
        self.count = 0
        self._orig = None

    def install(self) -> "RoundTrips":
        from redis.connection import AbstractConnection

        orig = self._orig = AbstractConnection.send_packed_command
        counter = self

        def send_packed_command(conn, command, check_health=True):
            counter.count += 1
            return orig(conn, command, check_health)

        AbstractConnection.send_packed_command = send_packed_command
        return self

    def uninstall(self) -> None:
        from redis.connection import AbstractConnection

        if self._orig is not None:
            AbstractConnection.send_packed_command = self._orig
            self._orig = None

    @contextlib.contextmanager
    def measure(self):
        box = {}
        start = self.count
        yield box
        box["n"] = self.count - start


@contextlib.contextmanager
def phase_times(sched):
    """Seconds spent in each phase of `sched`'s cycles while inside: read (Mirror.sync), policy
    (plan_cycle), commit (RedisPlanner.commit). Wraps them for the duration, measurement only."""
    import dispatcher.scheduler.loop as S

    totals: dict[str, float] = {}

    def wrap(name, fn):
        def timed_phase(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[name] = totals.get(name, 0.0) + time.perf_counter() - t0
        return timed_phase

    policy = S.plan_cycle
    S.plan_cycle = wrap("policy", policy)
    sched.mirror.sync = wrap("read", sched.mirror.sync)
    sched.planner.commit = wrap("commit", sched.planner.commit)
    try:
        yield totals
    finally:
        S.plan_cycle = policy
        del sched.mirror.sync, sched.planner.commit  # the classes' methods again


def breakdown_ms(totals: dict[str, float], total_s: float) -> dict[str, float]:
    """phase_times' totals in ms, with what the cycle spent elsewhere as "other"."""
    out = {k: round(v * 1000, 2) for k, v in totals.items()}
    out["other"] = round(total_s * 1000 - sum(out.values()), 2)
    return out


def commands_executed(client) -> int:
    """Commands the server has executed, from INFO commandstats (INFO itself left out; commands
    that Lua scripts call are counted too)."""
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


class Budget:
    """Wall time a scaling benchmark may spend. Its sizes run smallest first; a size whose smallest run
    is predicted not to fit in what is left is skipped, and the notes say so. The first always runs."""

    def __init__(self, bench: "Bench", what: str, seconds: float):
        self.bench, self.what, self.seconds = bench, what, seconds
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def allows(self, label: str, predicted_s: float | None, how: str = "") -> bool:
        if predicted_s is None or predicted_s <= self.left():
            return True
        self.bench.notes.append(f"{self.what} {label} skipped: its smallest run would take about {predicted_s:.0f} s"
                                f"{' (' + how + ')' if how else ''}, {self.left():.0f} s of the {self.seconds:g} s "
                                f"budget were left (run.py --budget)")
        return False


def extrapolate(measured, size: tuple[float, ...]) -> float | None:
    """Cost at `size` from (size, cost) pairs measured at sizes no larger in any dimension, assuming cost
    grows with the product of the dimensions; the smallest such guess, or None."""
    guesses = [cost * math.prod(a / b for a, b in zip(size, at)) for at, cost in measured
               if all(b <= a for a, b in zip(size, at))]
    return min(guesses) if guesses else None


# -- the server and processes -----------------------------------------------------------------
class Bench:
    """One run of the suite: its own server on a temp dir (no persistence), the mode, the processes
    it started (each in its own session, stopped by its pid)."""

    def __init__(self, tmp: Path, quick: bool):
        from dispatcher.up.embedded import EmbeddedServer
        from dispatcher.store.connect import connect

        self.tmp, self.quick = tmp, quick
        self.server = EmbeddedServer(tmp / "redis", appendonly=False).start()
        self.url = self.server.url
        self.client = connect(self.url)
        self.procs: list[subprocess.Popen] = []
        self.notes: list[str] = []
        #: Wall time each scaling benchmark (cycle, placement) may spend (run.py --budget).
        self.budget_s = 30.0 if quick else 480.0

    def budget(self, what: str) -> "Budget":
        return Budget(self, what, self.budget_s)

    def repeats(self, quick: int, full: int) -> int:
        return quick if self.quick else full

    def namespace(self, name: str) -> str:
        ns = f"bench-{name}"
        self.drop(ns)
        return ns

    def drop(self, ns: str) -> None:
        """Delete the namespace's keys, its RQ queues and registries and the RQ jobs they list."""
        c = self.client
        rq_keys = [k for k in c.scan_iter(match=f"rq:*{ns}*", count=1000)]
        ids = set()
        for k in rq_keys:
            kind = c.type(k)
            if kind == b"list":
                ids.update(c.lrange(k, 0, -1))
            elif kind == b"zset":
                ids.update(c.zrange(k, 0, -1))
        doomed = rq_keys + [k for k in c.scan_iter(match=f"{ns}:*", count=1000)]
        for i in ids:
            i = i.decode()
            doomed += [f"rq:job:{i}", f"rq:results:{i}", f"rq:job:{i}:dependents", f"rq:executions:{i}"]
        for start in range(0, len(doomed), 1000):
            c.unlink(*doomed[start:start + 1000])
        queues = [k for k in c.smembers("rq:queues") if ns.encode() in k]
        if queues:
            c.srem("rq:queues", *queues)

    def env(self, ns: str, **extra) -> dict:
        home = self.tmp / f"home-{ns}"
        home.mkdir(exist_ok=True)
        env = dict(os.environ, DISPATCH_REDIS_URL=self.url, DISPATCH_NAMESPACE=ns, DISPATCH_HOME=str(home),
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), PYTHONUNBUFFERED="1", **ROOT_JOBS)
        env.update(extra)
        return env

    def spawn(self, argv: list[str], ns: str, log_name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{log_name}.log", "ab")
        p = subprocess.Popen(argv, env=self.env(ns), stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def spawn_dispatch(self, args: list[str], ns: str, log_name: str) -> subprocess.Popen:
        return self.spawn([sys.executable, "-m", "dispatcher", *args], ns, log_name)

    def log_tail(self, log_name: str, n: int = 2000) -> str:
        try:
            return (self.tmp / f"{log_name}.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, procs: list[subprocess.Popen], timeout_s: float = 15.0) -> None:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            if p in self.procs:
                self.procs.remove(p)

    def close(self) -> None:
        self.stop(list(self.procs))
        self.client.close()
        self.server.stop()

    def machine(self) -> dict:
        info = self.client.info("server")
        return {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                "platform": platform.platform(), "server": info.get("server_name", "redis"),
                "server_version": info.get("valkey_version") or info.get("redis_version"),
                "redis_compat_version": info.get("redis_version"), "loadavg_at_start": os.getloadavg()}

"""The node agent: heartbeats the node's GPUs and runs the jobs of queue node.<name>.

The main thread runs an RQ SimpleWorker on the node's queue (JSON serializer, no
pickle); a heartbeat thread writes GPU state every Timing.heartbeat_s and checks
the running jobs for fencing, reported checkpoints and idle GPUs; a control thread reads the
node's command stream (preempt, cancel, shrink; dispatcher/store/control.py). SIGINT/SIGTERM stop the worker; the
agent then puts its running jobs back in the queue and deregisters the node (a second signal kills
the jobs at once; they are still recorded as requeued, not as lost attempts).

Failures (docs/guarantees.md): on start the agent kills what an earlier agent of
this node left running, replays what that agent kept in its outbox (workers/outbox.py)
and requeues the jobs Redis still shows on this node; it outlives any Redis outage
and reconnects by itself. A keeper process (workers/keeper.py) kills the node's jobs
once Timing.fence_s has passed since the last heartbeat Redis took, even while the
agent is stopped, since the scheduler reruns them elsewhere once the node is silent
for node_timeout_s.
"""

from __future__ import annotations

import logging
import os
import socket
import signal
import threading
import time
import uuid
from pathlib import Path

from dispatcher.store import control
from dispatcher.config import Timing
from dispatcher.core.errors import ConfigError
from dispatcher.store import keys
from dispatcher.store.connect import clone
from dispatcher.store.nodes import node_agent, other_agent, remove_node, schedule_facts, write_heartbeat
from dispatcher.store.scripts import Scripts

from . import commands, idle, jobs, proctrack, recovery, usage, zombies
from .keeper import Keeper
from dispatcher.store.repeating import Repeating
from .gpu import FakeProbe

log = logging.getLogger("dispatch.agent")


def default_mem_gb() -> float:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
    except (ValueError, OSError):
        return 0.0


def route_address(client) -> str:
    """This host's address on its route to the Redis server (a UDP connect sends nothing); 127.0.0.1
    for a server on a Unix socket or when there is no route."""
    kw = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None) or {}
    host, port = kw.get("host"), kw.get("port") or 6379
    if not host or kw.get("path"):
        return "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in str(host) else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port)))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def default_cpus(probe) -> int:
    """The CPUs a node offers without --cpus: its cores; with --fake-gpus at least one per fake GPU, so
    that `dispatch up --fake-gpus 4xA100-40GB` on a 2-core laptop runs 4 one-GPU jobs at once, as the
    GPUs it pretends to have promise (jobs there are tries of dispatch, not CPU-bound work)."""
    cores = os.cpu_count() or 1
    return max(cores, len(probe.gpus())) if isinstance(probe, FakeProbe) else cores


class NodeAgent:
    def __init__(self, client, ns: str, name: str, probe, *, cpus: int | None = None,
                 mem_gb: float | None = None, work_dir: Path, timing: Timing | None = None, url: str = "",
                 run_as_user: bool = False, verifier=None, kill_zombies: bool = False, allow_root_jobs: bool = False,
                 address: str | None = None, checkpoints: Path | None = None, stop: threading.Event | None = None):
        """`stop`: the event the caller's SIGINT/SIGTERM handler sets until run() puts in its own (a stop
        that came while the agent was made or looked for another agent of its node is not lost)."""
        self.timing = (timing or Timing()).check()
        # every call fails within socket_s, so a silent partition shows well inside fence_s
        client = clone(client, socket_timeout=self.timing.socket_s, socket_connect_timeout=self.timing.socket_s)
        self.client, self.ns, self.name, self.probe = client, ns, name, probe
        self.cpus = cpus if cpus is not None else default_cpus(probe)
        self.mem_gb = mem_gb if mem_gb is not None else default_mem_gb()
        self.scripts = Scripts(client, ns)
        self.address = address or route_address(client)  # advertised: a gang's ranks meet rank 0 there
        self.supervisor = jobs.Supervisor(client, ns, name, self.scripts, Path(work_dir), url, run_as_user,
                                          verifier, allow_root_jobs, self.address, checkpoints)
        self.peak_memory = usage.PeakMemory(client, ns, probe, self.supervisor)
        self.idle = idle.IdleWatch(client, ns, name, self.supervisor, self.scripts,
                                   heartbeat_s=self.timing.heartbeat_s)
        self._stop = stop if stop is not None else threading.Event()
        self.hurry = threading.Event()  # a second stop signal: kill the jobs now (still requeued)
        self._last_facts = None  # schedule_facts of the last heartbeat Redis took
        self._last_beat = time.monotonic()  # when the last heartbeat Redis took was sent
        self._beaten = False  # whether one was
        self.superseded = False  # another agent took this node's name over: this one stops, and leaves it be
        self.keeper = Keeper(Path(work_dir), self.timing.fence_s, url or getattr(client, "dispatch_url", ""), ns)
        self.zombies = zombies.Zombies(self.supervisor, name, kill_zombies)
        # what names this agent in its node's record: its host and work dir (one agent holds a work dir)
        self.claim = f"{socket.gethostname()}:{self.supervisor.work_dir}"

    def heartbeat(self) -> list:
        """Write the GPUs' state and tell the keeper; returns the sample written (GpuInfo list). Superseded
        if another agent beats for this node now (this one was declared dead while it was stopped)."""
        if self._beaten:  # (a new agent's first beat takes the node over from a dead one's name)
            holder = node_agent(self.client, self.ns, self.name)
            if holder and holder != self.claim:
                raise Superseded(holder)
        gpus = self.zombies.mark(self.probe.gpus(), self.probe)
        self.supervisor.gpus = {g.index: g for g in gpus}
        facts = schedule_facts(gpus, self.cpus, self.mem_gb)
        changed = facts != self._last_facts  # the scheduler rereads the node, and wakes for it
        sent = time.monotonic()  # the keeper counts from before the write, never from its reply
        write_heartbeat(self.client, self.ns, self.name, gpus, self.cpus, self.mem_gb, int(time.time() * 1000),
                        announce=changed, changed=changed, address=self.address, agent=self.claim,
                        timeout_s=self.timing.node_timeout_s)
        self._last_facts = facts
        self._last_beat, self._beaten = sent, True
        self.supervisor.fresh_until = sent + self.timing.fence_s  # (launches refused past it: launching.py)
        if self.keeper.proc is not None:
            self.keeper.beat(sent)
        return gpus

    def _heartbeat_loop(self) -> None:
        beats, failing = 0, Repeating(log, "heartbeat")  # (not a line a beat while Redis is away)
        while not self._stop.wait(self.timing.heartbeat_s):
            try:
                gpus = self.heartbeat()
                self.supervisor.flush_outbox()
                self.supervisor.check()
                self.peak_memory.sample()  # each job's peak GPU memory, into its record (workers/usage.py)
                self.idle.sample(gpus)  # idle GPUs: warn, and requeue if the policy says so (workers/idle.py)
                beats += 1
                failing.success()
                if beats % 10 == 0:  # e.g. an outcome Redis lost in a restart: requeue, never leave it
                    recovery.reconcile(self.supervisor, f"node {self.name} runs no such attempt; attempt lost")
            except Superseded as e:
                self._give_way(str(e))
                return
            except Exception as e:  # keep beating through Redis hiccups
                silent = time.monotonic() - self._last_beat
                failing.failure(e, f"{silent:.0f}s without one")
                if silent > self.timing.fence_s:
                    self.supervisor.fence_all(f"node {self.name} could not reach Redis for {silent:.0f}s")

    def _give_way(self, holder: str) -> None:
        """Another agent runs this node now (this one was stopped past the node timeout, and declared
        dead: its jobs were requeued, and may run there again). Kill what this one still runs, without a
        word on their records (stale copies), and stop, leaving the node's registration to that agent."""
        log.error("node %s is run by another agent now (%s): this one was stopped past the node timeout and "
                  "taken for dead; it kills its stale jobs and stops", self.name, holder)
        self.superseded = True
        self.supervisor.fresh_until = float("-inf")  # no start here from now on: each launch goes back
        for run in self.supervisor.stale_all():
            log.warning("job %s: its stale copy (epoch %d) killed", run.job_id, run.epoch)
        # A launch its RQ worker's BLPOP took while it was stopped waits in its socket: a moment for the
        # worker to take it and send its job back to the queue, which a stop now would lose (for a minute).
        self._stop.wait(GIVE_WAY_S)
        os.kill(os.getpid(), signal.SIGTERM)  # RQ's warm shutdown, then shutdown() (which leaves the node be)

    def recover(self) -> list[str]:
        """Before taking work: kill what an earlier agent of this node left running, write what it
        kept in its outbox (outcomes of jobs that ended while Redis was away), and put back in the
        queue every job Redis still shows on this node (that agent died without saying so)."""
        recovery.kill_leftovers(self.supervisor.work_dir)
        self.supervisor.flush_outbox()
        return recovery.reconcile(self.supervisor, f"node {self.name} agent restarted; attempt lost", everything=True)

    def _until_redis_answers(self, what: str, step) -> bool:
        """Run `step` until Redis takes it, backing off to 10 s; False if a stop came meanwhile."""
        wait = 0.5
        while not self._stop.is_set():
            try:
                step()
                return True
            except Exception as e:
                log.warning("%s: %s; retrying in %.1fs", what, e, wait)
                self._stop.wait(wait)
                wait = min(wait * 2, 10.0)
        return False

    def _control_loop(self) -> None:
        """Commands left unfinished by an earlier agent of this node first, then new ones as they come."""
        pending, failing = True, Repeating(log, "control channel read")
        # its read blocks for up to a second on top of the usual reply time
        client = clone(self.client, socket_timeout=self.timing.socket_s + 1.0)
        while not self._stop.is_set():
            try:
                control.ensure_group(client, self.ns, self.name)
                for entry_id, cmd in control.read(client, self.ns, self.name, pending=pending, block_ms=1000):
                    commands.handle(self.supervisor, entry_id, cmd)
                pending = False
                failing.success()
            except Exception as e:  # Redis away: keep trying; unfinished commands wait in the stream
                failing.failure(e)
                pending = True
                self._stop.wait(1.0)

    def run(self) -> None:
        """Blocks until SIGINT/SIGTERM (RQ's warm shutdown), then cleans up. (Under `dispatch up` the
        agent is a process of its own, which `up` stops after the scheduler: up/supervisor.py.)"""
        from rq import Queue
        from rq.serializers import JSONSerializer

        from .rq_worker import AgentWorker

        self._lock = _lock_work_dir(self.supervisor.work_dir, self.name)
        other: list = []
        if not self._until_redis_answers("checking that no other agent runs this node", lambda: other.append(
                other_agent(self.client, self.ns, self.name, self.claim, int(time.time() * 1000),
                            self.timing.node_timeout_s))):
            self.shutdown()
            return
        if other[-1] is not None:
            self.shutdown()
            holder, ago = other[-1]
            raise ConfigError(f"node {self.name} has a live agent already ({holder}, its heartbeat {ago:.0f}s ago): "
                              "a second would run its jobs twice; give this one another --node, or stop that one "
                              f"(or wait {self.timing.node_timeout_s:g}s after it died)", key="--node")
        self.supervisor.channel.start()  # the jobs' way to ask for things (workers/jobchannel.py)
        jobs._supervisor = self.supervisor
        stop = _StopOnSignal(self._stop, self.hurry)
        if not (self._until_redis_answers("recovering the node's jobs", self.recover)  # (before the first beat: a
                and self._until_redis_answers("first heartbeat", self.heartbeat)):  # job placed after it is this
            # agent's, not a leftover; one placed back on the dead agent's GPUs is refused at launch: launching.py)
            self.shutdown()
            return
        self.keeper.start(self._last_beat)
        beat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        threading.Thread(target=self._control_loop, name="control", daemon=True).start()
        # RQ blocks in BLPOP for minutes: its connection must not have redis-py's 5 s read timeout.
        rq_client = clone(self.client, socket_timeout=None)
        queue = Queue(keys.rq_queue_name(self.ns, self.name), connection=rq_client, serializer=JSONSerializer)
        log.info("node %s: %d GPUs, %d CPUs, %.0f GB; listening on RQ queue %s",
                 self.name, len(self.probe.gpus()), self.cpus, self.mem_gb, queue.name)
        try:
            wait = 0.5
            while not self._stop.is_set():
                worker = None
                try:  # SimpleWorker itself talks to Redis: a server that is down fails its constructor
                    worker = AgentWorker([queue], connection=rq_client, serializer=JSONSerializer,
                                          name=f"{self.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}")
                    worker.hurry, worker.asked = self.hurry, self._stop
                    started = time.monotonic()
                    worker.work(logging_level="WARNING", with_scheduler=False)
                    break  # a warm shutdown (SIGINT/SIGTERM)
                except Exception as e:
                    if getattr(worker, "stop_asked", False):
                        break  # a warm shutdown whose teardown could not reach the server
                    # RQ retries a lost server while it waits for work, but not while it starts or
                    # finishes a launch: the agent outlives that (its jobs, heartbeats and outbox carry
                    # on) and starts a new worker once the server is back
                    if worker is not None and time.monotonic() - started > 60:
                        wait = 0.5
                    log.warning("RQ worker stopped (%s: %s); starting a new one in %.1fs", type(e).__name__, e, wait)
                    stop.install()  # RQ's handlers belong to the worker that stopped
                    if self._stop.wait(wait) or getattr(worker, "_stop_requested", False):
                        break
                    wait = min(wait * 2, 10.0)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Deregister first (no new work comes here), then stop and requeue the running jobs; a further
        SIGINT/SIGTERM kills them at once (still requeued: the operator stopped them)."""
        self._stop.set()
        _StopOnSignal(self._stop, self.hurry)  # (RQ's handlers would exit at once: jobs left unrecorded)
        try:
            if not self.superseded:  # (the node's record is another agent's now; or never this one's: refused)
                remove_node(self.client, self.ns, self.name, self.claim)
        except Exception as e:
            log.warning("could not deregister node %s: %s", self.name, e)
        self.supervisor.stop_all(hurry=self.hurry)
        self.supervisor.channel.close()
        self.keeper.close()
        proctrack.remove_node_cgroup(self.supervisor.cgroups)
        self.probe.close()
        jobs._supervisor = None
        if getattr(self, "_lock", None) is not None:
            self._lock.close()  # the next agent of this work dir may start
            self._lock = None


#: How long an agent that finds another running its node waits before it stops (see _give_way).
GIVE_WAY_S = 2.0


class Superseded(Exception):
    """Another agent beats for this agent's node: its name (host:work dir)."""


class _StopOnSignal:
    """SIGINT/SIGTERM while no RQ worker runs (Redis away, or stopping): the first stops the agent
    cleanly, the next ones hurry it."""

    def __init__(self, stop: threading.Event, hurry: threading.Event):
        self.stop, self.hurry = stop, hurry
        self.install()

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: (self.hurry if self.stop.is_set() else self.stop).set())


def _lock_work_dir(work_dir: Path, node: str):
    """One agent per work dir: a second would kill the first one's jobs as leftovers and rerun them.
    The lock goes with the process, so one left by an agent that died is free again."""
    import fcntl

    work_dir.mkdir(parents=True, exist_ok=True)
    f = open(work_dir / "agent.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise ConfigError(f"node {node}: an agent already runs with work dir {work_dir} ({holder}); stop it first, "
                          f"or give this one another --work-dir", key="--work-dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}")
    f.flush()
    return f

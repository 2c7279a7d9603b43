"""The faults, injected while jobs are still being submitted; each is counted by kind.

A fault that lasts (a restart after a pause, a SIGSTOP, a partition, a full disk) is a start now and
an undo on a timeline, so that submits and other faults go on meanwhile. Each fault holds its targets
(the server, an agent, the far node) until its undo ran, so two faults never fight over one process.

    server             kill -9 of the server; procs: the suite starts it again on the same port and
                       files; up: `up` must (the run ends early if it has not within UP_RESTART_S)
    agent              kill -9 of a node agent, started again 0.2-2 s later
    agent-redis-down   kill -9 of the server, then of an agent; the agent comes back while Redis is
                       still down or after it, at random
    job                kill -9 of a job's process (a live attempt, from its file)
    scheduler          kill -9 of a scheduler, started again 0.1-1 s later
    agent-stop         SIGSTOP of an agent (preferring one with running jobs) past the node timeout
    leader-stop        SIGSTOP of the scheduler holding the lease past the lease, then SIGCONT
    partition-down     the far node's link down past the node timeout (netns)
    partition-drop     every packet to and from the far node silently dropped, as long (netns, tc)
    second-up          a second `dispatch up` on the same state dir, as typed again (no --port), stopped
                       with SIGTERM after 4 s if it did not refuse; then the CLI must still reach the
                       first (up mode)
    disk-full          the server's data dir (a small tmpfs) filled to the last byte for 2-4 s
"""

from __future__ import annotations

import heapq
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import attempts
from procs import ROOT, alive, cmdline, descendants

KINDS = ("server", "agent", "agent-redis-down", "job", "scheduler", "agent-stop", "leader-stop",
         "partition-down", "partition-drop", "second-up", "disk-full")
UP_RESTART_S = 30.0  # how long `up` has to bring its killed server back
FAR_WAIT_S = 30.0  # how long a partition waits for the far node to hold running jobs


def unavailable(kind: str, cluster) -> str | None:
    """Why `kind` cannot run in this cluster, or None."""
    if kind in ("partition-down", "partition-drop") and cluster.netnode is None:
        return "needs --netns"
    if kind == "partition-drop" and not cluster.netnode.can_drop():
        return "needs tc"
    if kind == "second-up" and cluster.mode != "up":
        return "needs --up"
    if kind == "disk-full" and cluster.disk is None:
        return "needs root (a tmpfs under the data dir)"
    return None


class Injector:
    def __init__(self, cluster, rng, kinds, node_timeout_s: float, lease_s: float):
        self.c, self.rng, self.kinds = cluster, rng, list(kinds)
        self.node_timeout_s, self.lease_s = node_timeout_s, lease_s
        self.counts: Counter = Counter()  # faults injected, by kind
        self.skipped: Counter = Counter()  # chosen but nothing to aim at
        self.failed_checks: list[str] = []  # a fault that could not be made as meant (the run fails)
        self.notes: list[str] = []
        self.findings: Counter = Counter()  # problems seen on the way, beside the verdict
        self.stalled: str | None = None  # set when the run cannot go on
        self.held: set[str] = set()
        self.killed: set[str] = set()  # jobs whose process it killed -9: each fails (docs/guarantees.md)
        self.own: set[int] = set()  # processes of the injector itself (a second up), waited for by it
        self._timeline: list = []
        self._seq = itertools.count()
        self._round: list[str] = []
        self.work_left = lambda: True  # whether jobs are still to come or to run (set by the run)
        self.cut_off: list[list] = []  # [node, from, to]: wall-clock windows of the partitions made

    # --- the timeline ---------------------------------------------------------------------------------

    def later(self, delay_s: float, fn, *args) -> None:
        heapq.heappush(self._timeline, (time.monotonic() + delay_s, next(self._seq), fn, args))

    def run_due(self) -> None:
        while self._timeline and self._timeline[0][0] <= time.monotonic():
            _, _, fn, args = heapq.heappop(self._timeline)
            self.event(f"  {fn.__name__.strip('_')} {' '.join(a for a in args if isinstance(a, str))}")
            fn(*args)

    @property
    def pending(self) -> int:
        return len(self._timeline)

    def note(self, line: str) -> None:
        self.notes.append(f"{time.strftime('%H:%M:%S')} {line}")
        self.event(line)

    def event(self, line: str) -> None:
        """One line of logs/faults.log, stamped with the clock the attempt files use."""
        with open(self.c.fleet.logs / "faults.log", "a") as f:
            f.write(f"{time.time():.3f} {line}\n")

    def _release(self, *targets) -> None:
        self.held.difference_update(targets)

    # --- choosing ---------------------------------------------------------------------------------------

    def inject(self) -> str | None:
        """One fault; its kind, or None if no kind found a target now. Kinds come in rounds, each round
        every kind once in an order drawn from the seed, so that every kind is made even in a short run;
        a kind that finds no free target now stays in the round for the next turn."""
        if not self._round:
            self._round = self.kinds[:]
            self.rng.shuffle(self._round)
        for kind in list(self._round):
            if getattr(self, "_" + kind.replace("-", "_"))():
                self._round.remove(kind)
                return kind
        return None

    def _free_agents(self) -> list[str]:
        return [a for a in self.c.agents() if a not in self.held and self.c.alive(a)]

    # --- the kinds: each returns True once it started ---------------------------------------------

    def _server(self) -> bool:
        if "server" in self.held or not self.c.kill_server():
            return False
        self.held.add("server")
        self.counts["server"] += 1
        self.event("server: kill -9")
        self.later(self.rng.uniform(0.2, 1.5), self._server_back, time.monotonic(), ("server",), None)
        return True

    def _server_back(self, since: float, release: tuple, then) -> None:
        """procs: start the server again (retrying); up: wait for `up` to have done it."""
        if self.c.mode == "procs":
            err = self.c.start_server()
            if err is not None:
                self.findings["server restart failed (retried)"] += 1
                self.note(f"server restart failed, retrying: {err}")
                self.later(1.0, self._server_back, since, release, then)
                return
        elif not self.c.answers():
            if time.monotonic() - since > UP_RESTART_S:
                self.stalled = f"dispatch up did not restart its killed server within {UP_RESTART_S:g} s"
                self.note(self.stalled)
                return
            self.later(0.5, self._server_back, since, release, then)
            return
        else:
            self.note(f"up restarted its server in {time.monotonic() - since:.1f} s")
        self._release(*release)
        if then is not None:
            then()

    def _agent(self) -> bool:
        agents = self._free_agents()
        if not agents:
            return False
        a = self.rng.choice(agents)
        pid = self.c.kill(a)
        if pid is None:
            return False
        self.held.add(a)
        self.counts["agent"] += 1
        self.event(f"agent: kill -9 {a} (pid {pid})")
        self.later(self.rng.uniform(0.2, 2.0), self._back, a, pid, time.monotonic())
        return True

    def _back(self, name: str, pid: int, since: float) -> None:
        """Start a killed process again; one of `up`'s: wait for `up` to have done it."""
        if self.c.restart(name):
            self._release(name)
            return
        now_pid = self.c.pid(name)
        if now_pid is not None and now_pid != pid:
            self.note(f"up restarted its {name[3:]} in {time.monotonic() - since:.1f} s")
            self._release(name)
        elif time.monotonic() - since > UP_RESTART_S:
            self.failed_checks.append(f"dispatch up did not restart its killed {name[3:]} within {UP_RESTART_S:g} s")
            self.note(self.failed_checks[-1])
            self._release(name)
        else:
            self.later(0.5, self._back, name, pid, since)

    def _agent_redis_down(self) -> bool:
        agents = self._free_agents()
        if "server" in self.held or not agents:
            return False
        a = self.rng.choice(agents)
        if not self.c.kill_server():
            return False
        pid = self.c.kill(a)
        self.held |= {"server", a}
        self.counts["agent-redis-down"] += 1
        since = time.monotonic()
        early = self.rng.random() < 0.5  # the agent comes back first, into a Redis that is still down
        self.event(f"agent-redis-down: kill -9 the server, then {a}; {a} back {'before' if early else 'after'} it")
        if early:
            self.later(self.rng.uniform(0.2, 0.8), self._agent_back_early, a, pid, since)
        else:
            self.later(self.rng.uniform(0.3, 1.5), self._server_back, since, ("server",),
                       lambda: self.later(self.rng.uniform(0.1, 1.0), self._back, a, pid, time.monotonic()))
        return True

    def _agent_back_early(self, a: str, pid: int, since: float) -> None:
        self._back(a, pid, since)  # (one of up's: up restarts it when it will; it is watched from here)
        self.later(self.rng.uniform(0.5, 1.5), self._server_back, since, ("server",), None)

    def _job(self) -> bool:
        live = [a for a in attempts.live(self.c.files, 1.0) if alive(a.pid) and attempts.MARK in cmdline(a.pid)]
        if not live:
            return False
        victim = self.rng.choice(live)
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.counts["job"] += 1
        self.killed.add(victim.job)
        self.event(f"job: kill -9 job {victim.job} attempt {victim.attempt} on {victim.node} (pid {victim.pid})")
        return True

    def _scheduler(self) -> bool:
        free = [s for s in self.c.schedulers() if s not in self.held and self.c.alive(s)]
        if not free:
            return False
        s = self.rng.choice(free)
        pid = self.c.kill(s)
        if pid is None:
            return False
        self.held.add(s)
        self.counts["scheduler"] += 1
        self.event(f"scheduler: kill -9 {s} (pid {pid})")
        self.later(self.rng.uniform(0.1, 1.0), self._back, s, pid, time.monotonic())
        return True

    def _agent_stop(self) -> bool:
        agents = self._free_agents()
        if not agents:
            return False
        busy_nodes = {a.node for a in attempts.live(self.c.files, 1.0)}
        holding = [a for a in agents if self.c.node_of(a) in busy_nodes]
        a = self.rng.choice(holding or agents)
        if not self.c.pause(a, True):
            return False
        self.held.add(a)
        self.counts["agent-stop"] += 1
        self.event(f"agent-stop: SIGSTOP {a}")
        self.later(self.node_timeout_s + 3.0, self._cont, a)
        return True

    def _cont(self, name: str) -> None:
        self.c.pause(name, False)
        self._release(name)

    def _leader_stop(self) -> bool:
        leader = self.c.leader()
        if leader is None or leader in self.held:
            return False
        if not self.c.pause(leader, True):
            return False
        self.held.add(leader)
        self.counts["leader-stop"] += 1
        self.event(f"leader-stop: SIGSTOP {leader}")
        self.later(self.lease_s + 2.0, self._cont, leader)
        return True

    def _partition_down(self) -> bool:
        return self._partition("down")

    def _partition_drop(self) -> bool:
        return self._partition("drop")

    def _partition(self, how: str) -> bool:
        if self.c.netnode is None or "far" in self.held or "agent-far" in self.held:
            return False
        self.held |= {"far", "agent-far"}
        self._partition_when_ready(how, time.monotonic())
        return True

    def _partition_when_ready(self, how: str, since: float) -> None:
        """Cut only once the far agent runs and holds jobs (files of live attempts on node far)."""
        far_live = [a for a in attempts.live(self.c.files, 1.0) if a.node == "far"]
        if not (self.c.fleet.alive("agent-far") and far_live):
            if not self.work_left():  # no job left to place there: nothing to cut, and nothing wrong
                self.skipped[f"partition-{how}: no job left to place on the far node"] += 1
                self._release("far", "agent-far")
                return
            if time.monotonic() - since > FAR_WAIT_S:
                self.failed_checks.append(f"partition-{how}: the far agent held no running job for "
                                          f"{FAR_WAIT_S:g} s; nothing was cut")
                self._release("far", "agent-far")
                return
            self.later(0.5, self._partition_when_ready, how, since)
            return
        self.cut_off.append(["far", time.time(), None])
        self.c.netnode.partition(how)
        self.counts[f"partition-{how}"] += 1
        self.note(f"partition-{how}: far node cut off holding {len(far_live)} running jobs")
        self.later(self.node_timeout_s + 5.0, self._heal)

    def _heal(self) -> None:
        self.c.netnode.heal()
        self.cut_off[-1][2] = time.time()
        self._release("far", "agent-far")

    def _second_up(self) -> bool:
        if self.c.mode != "up" or "second-up" in self.held:
            return False
        self.held.add("second-up")
        env = {k: v for k, v in dict(os.environ, **self.c.fleet.env, **self.c.up_env()).items() if v is not None}
        log = open(self.c.fleet.logs / "second-up.log", "ab")
        args = list(self.c.up_args)  # the same command, without the first one's --port (as a user types it again)
        del args[args.index("--port"):args.index("--port") + 2]
        p = subprocess.Popen([sys.executable, "-m", "dispatcher", *args], env=env, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT))
        log.close()
        self.own.add(p.pid)  # waited for here, not reaped as an orphan (its exit code would read 0)
        self.counts["second-up"] += 1
        self.event(f"second-up: pid {p.pid}")
        self.later(4.0, self._second_up_end, p)
        return True

    def _second_up_end(self, p: subprocess.Popen) -> None:
        if p.poll() is not None:
            self.own.discard(p.pid)
            first = self.c.fleet.logs.joinpath("second-up.log").read_text(errors="replace").strip().splitlines()
            self.note(f"second up exited {p.returncode} within 4 s: {first[-1] if first else ''}")
            if p.returncode == 0:
                self.findings["a second up refused but exited 0"] += 1
        else:
            self.note("second up still running after 4 s: stopped with SIGTERM")
            below = descendants(p.pid)
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for pid in below:  # what it started and left (its server)
                if alive(pid) and pid not in self.c.fleet.popen_pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self._cli_check(time.monotonic())

    def _cli_check(self, since: float) -> None:
        """The CLI as a user runs it (no --redis: the server `up` recorded) must still reach the first up
        (asked once no fault of the server is under way)."""
        if "server" in self.held and time.monotonic() - since < UP_RESTART_S:
            self.later(0.5, self._cli_check, since)
            return
        self._release("second-up")
        env = {k: v for k, v in dict(os.environ, **self.c.up_env(), DISPATCH_NAMESPACE="chaos").items()
               if v is not None}
        p = subprocess.run([sys.executable, "-m", "dispatcher", "nodes"], env=env, capture_output=True, text=True,
                           timeout=30, cwd=str(ROOT))
        if p.returncode != 0:
            self.findings["CLI could not reach the first up after a second up"] += 1
            self.note(f"after a second up, `dispatch nodes` exits {p.returncode}: {p.stderr.strip()[-200:]}")

    def _disk_full(self) -> bool:
        if self.c.disk is None or "server" in self.held:
            return False
        self.held.add("server")
        left = self.c.disk.fill()
        self.counts["disk-full"] += 1
        self.event(f"disk-full: {left} bytes left free")
        if left > 64 * 1024:
            self.failed_checks.append(f"disk-full: {left} bytes still free after filling")
        self.later(self.rng.uniform(2.0, 4.0), self._disk_free)
        return True

    def _disk_free(self) -> None:
        self.c.disk.free()
        self._release("server")

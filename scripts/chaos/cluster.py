"""The cluster under test, in one of two shapes, all real processes on this machine:

- "procs": the suite's own server (an EmbeddedServer with the append-only file and `dispatch up`'s
  everysec, restarted by the suite on the same port and data dir after it is killed, as `up` would),
  two schedulers (one leads, one stands by), one node agent per node and, with a network namespace,
  one more agent as a far host;
- "up": a real `dispatch up` (its embedded server, scheduler and node agent `up0` in one process, on a
  fixed --port so that a restart keeps the address), node agents on the other nodes (as other hosts
  would run them, with --redis) and one standby scheduler. Here `up` alone is in charge of its server:
  the suite kills it and waits for `up` to bring it back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

from procs import Fleet, alive, cmdline, descendants

from dispatcher.up.embedded import EmbeddedServer, free_port
from dispatcher.core.errors import ConfigError
from dispatcher.store import keys
from dispatcher.store.connect import connect, text
from hostfaults import DataDisk, NetNode

NS = "chaos"
TIMING = {"DISPATCH_HEARTBEAT_S": "0.5", "DISPATCH_NODE_TIMEOUT_S": "5", "DISPATCH_LEASE_S": "3",
          "DISPATCH_TICK_S": "0.5"}


class Cluster:
    def __init__(self, base: Path, *, up: bool, nodes: int, gpus: int, netns: bool, disk: bool):
        self.base, self.mode, self.nodes_n, self.gpus = base, "up" if up else "procs", nodes, gpus
        self.files = base / "jobs"
        self.files.mkdir(parents=True, exist_ok=True)
        self.home = base / "up-home"  # `up`'s state dir (server.json, data/)
        self.data = (self.home / "data") if up else (base / "redis")
        # run as root (CI), the agents run the suite's jobs as root, on purpose
        root_jobs = {"DISPATCH_ALLOW_ROOT_JOBS": "1"} if os.geteuid() == 0 else {}
        self.fleet = Fleet(base / "logs", dict(TIMING, DISPATCH_NAMESPACE=NS, LC_ALL="C", **root_jobs))
        self.netnode = NetNode().create() if netns else None
        self.disk = DataDisk(self.data).mount() if disk else None
        self.server: EmbeddedServer | None = None
        self.server_killed = False  # by the suite, and not yet started again (procs mode)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._client = None
        self.up_args: tuple = ()
        self._paused: dict[str, int] = {}  # up's children stopped, by name
        self._killed: set[int] = set()  # up's children the suite killed
        self._up_seen: dict[str, int | None] = {}

    # --- starting -------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.mode == "procs":
            bind = "127.0.0.1" + (f" {self.netnode.host_ip}" if self.netnode else "")
            self.server = EmbeddedServer(self.data, self.port, fsync="everysec", bind=bind).start()
            env = {"DISPATCH_REDIS_URL": self.url, "DISPATCH_HOME": str(self.base / "home")}
            for i in range(2):
                self.fleet.start(f"scheduler-{i}", "scheduler", "scheduler", env=env)
            for i in range(self.nodes_n):
                self._agent(f"n{i}", env)
        else:
            self.up_args = ("up", "--node", "up0", "--port", str(self.port), "--fake-gpus", f"{self.gpus}xA100-40GB",
                            "--no-dashboard", "--work-dir", str(self.base / "nodes" / "up0"))
            self.fleet.start("up", "up", *self.up_args, env=self.up_env())
            self._wait_for_up()
            # a locked `up`: the others log in as its admin and check jobs with its lab secret, as a lab
            # adding hosts to it would
            env = {"DISPATCH_REDIS_URL": self.url, "DISPATCH_HOME": str(self.base / "home"),
                   "DISPATCH_SECRET_FILE": str(self.home / "secret")}
            self.fleet.start("scheduler-1", "scheduler", "scheduler", env=env)
            for i in range(1, self.nodes_n):
                self._agent(f"n{i}", env)
        if self.netnode:
            far = self.url.replace("@127.0.0.1:", f"@{self.netnode.host_ip}:").replace(
                "//127.0.0.1:", f"//{self.netnode.host_ip}:")
            # the subcommand's own --redis (`dispatch --redis URL worker` is not a command: the old suite's
            # far agent never ran)
            self.fleet.start("agent-far", "agent", "worker", "--redis", far, "--node", "far", "--fake-gpus",
                             f"{self.gpus}xA100-40GB", "--work-dir", str(self.base / "nodes" / "far"),
                             prefix=self.netnode.prefix,
                             env={"DISPATCH_REDIS_URL": far, "DISPATCH_HOME": str(self.base / "home-far"),
                                  **({"DISPATCH_SECRET_FILE": str(self.home / "secret")} if self.mode == "up" else {})})
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Every node heartbeating and a scheduler leading, before the first submit and the first fault."""
        want = {self.node_of(a) for a in self.agents()} | ({"up0"} if self.mode == "up" else set())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                seen = {text(n) for n in self.client().zrange(keys.nodes_heartbeat(NS), 0, -1)}
            except Exception:
                seen = set()
            if want <= seen and self.leader() is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the cluster did not come up in {timeout_s:g}s: nodes {sorted(want - seen)} silent "
                           f"or no scheduler leads; logs in {self.fleet.logs}")

    def submit_as_owner(self) -> None:
        """A locked `up` has identity on: this process submits as its owner, with the token it wrote."""
        if self.mode == "up":
            saved = json.loads((self.home / "token").read_text())
            os.environ.update(DISPATCH_TOKEN=saved["token"], DISPATCH_USER=saved["user"])

    def up_env(self) -> dict:
        """`up` as a user runs it: its own state dir, no Redis URL in the environment."""
        return {"DISPATCH_HOME": str(self.home), "DISPATCH_REDIS_URL": None}

    def _agent(self, node: str, env: dict) -> None:
        self.fleet.start(f"agent-{node}", "agent", "worker", "--node", node, "--fake-gpus", f"{self.gpus}xA100-40GB",
                         "--work-dir", str(self.base / "nodes" / node), env=env)

    def _wait_for_up(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        pid = self.fleet.pid("up")
        while time.monotonic() < deadline:
            if not self.fleet.alive("up"):
                raise RuntimeError(f"dispatch up exited at start:\n{self.fleet.tail('up')}")
            try:
                info = json.loads((self.home / "server.json").read_text())
                if info.get("pid") == pid and info.get("port") == self.port and info.get("status") == "running":
                    self.url, self._client = info["url"], None  # its admin login (a locked up has a password)
                    if self.answers():
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"dispatch up did not record its server in {timeout_s:g}s:\n{self.fleet.tail('up')}")

    # --- the server -----------------------------------------------------------------------------------

    def client(self):
        if self._client is None:
            self._client = connect(self.url, check=False, socket_timeout=5, socket_connect_timeout=2)
        return self._client

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False

    def server_pid(self) -> int | None:
        if self.mode == "procs":
            return self.server.proc.pid if self.server and self.server.proc and self.server.proc.poll() is None \
                else None
        try:  # `up`'s server, whichever process it is now
            return int(self.client().info("server")["process_id"])
        except Exception:
            return None

    def kill_server(self) -> bool:
        pid = self.server_pid()
        if pid is None:
            return False
        if self.mode == "procs":
            self.server_killed = True
            self.server.proc.send_signal(signal.SIGKILL)
            self.server.proc.wait()
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return False
            deadline = time.monotonic() + 5
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        return True

    def start_server(self) -> str | None:
        """procs mode: start the server again on the same port and files; the error, or None."""
        try:
            self.server.start()
        except ConfigError as e:
            return str(e)
        self.server_killed = False
        return None

    def server_died(self) -> str | None:
        """procs mode: the server exited without the suite killing it (it is started again); its log tail."""
        if self.mode != "procs" or self.server_killed or self.server.proc.poll() is None:
            return None
        tail = "\n".join((self.data / "server.log").read_text(errors="replace").splitlines()[-8:])
        if self.start_server() is not None:
            self.server_killed = True  # the faults' restart loop takes it from here
        return tail

    # --- what faults aim at: the suite's processes by name, and `up`'s children as up:agent, up:scheduler -----

    def up_child(self, role: str) -> int | None:
        """The pid of `up`'s own child process running `dispatch worker` (role agent) or `dispatch scheduler`,
        if this `up` runs them as processes (an older `up` ran them as threads of its own)."""
        up = self.fleet.pid("up")
        if up is None:
            return None
        word = {"agent": "worker", "scheduler": "scheduler"}[role]
        for pid in descendants(up):
            if f"-m dispatcher {word}" in cmdline(pid):
                return pid
        return None

    def agents(self) -> list[str]:
        return self.fleet.names("agent") + (["up:agent"] if self.up_child("agent") else [])

    def schedulers(self) -> list[str]:
        return self.fleet.names("scheduler") + (["up:scheduler"] if self.up_child("scheduler") else [])

    def pid(self, name: str) -> int | None:
        return self.up_child(name[3:]) if name.startswith("up:") else self.fleet.pid(name)

    def alive(self, name: str) -> bool:
        return self.pid(name) is not None

    def kill(self, name: str) -> int | None:
        """kill -9; the pid killed, or None if it was not running. `up`'s children are `up`'s to restart."""
        if not name.startswith("up:"):
            pid = self.fleet.pid(name)
            return pid if self.fleet.kill(name) else None
        pid = self.pid(name)
        if pid is None:
            return None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        self._killed.add(pid)
        return pid

    def pause(self, name: str, on: bool) -> bool:
        """SIGSTOP (on) or SIGCONT (the same process that was stopped)."""
        if not name.startswith("up:"):
            return self.fleet.pause(name, on)
        pid = self.pid(name) if on else self._paused.pop(name, None)
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGSTOP if on else signal.SIGCONT)
        except ProcessLookupError:
            return False
        if on:
            self._paused[name] = pid
        return True

    def restart(self, name: str) -> bool:
        """Start a killed process of the suite again; False for `up`'s children (`up` must)."""
        if name.startswith("up:"):
            return False
        self.fleet.restart(name)
        return True

    def up_children_died(self) -> list[tuple[str, int]]:
        """`up`'s children that vanished without the suite killing them: (name, pid)."""
        out = []
        for name in ("up:agent", "up:scheduler"):
            pid = self.pid(name)
            before = self._up_seen.get(name)
            if before is not None and before != pid and not alive(before) and before not in self._killed:
                out.append((name, before))
            self._up_seen[name] = pid if pid is not None else (before if before is not None and alive(before)
                                                                  else None)
        return out

    @staticmethod
    def node_of(agent: str) -> str:
        return "up0" if agent in ("up", "up:agent") else agent.removeprefix("agent-")

    def leader(self) -> str | None:
        """The process that holds the scheduler lease, by the pid in its holder id: one of the suite's, or
        `up`'s scheduler child."""
        try:
            holder = text(self.client().get(keys.scheduler_leader(NS)))
            pid = int(holder.split(":")[1])
        except Exception:
            return None
        if self.fleet.by_pid(pid):
            return self.fleet.by_pid(pid)
        return "up:scheduler" if pid == self.up_child("scheduler") else None

    def states(self, job_ids: list[str]) -> dict[str, str] | None:
        try:
            pipe = self.client().pipeline(transaction=False)
            for j in job_ids:
                pipe.hget(keys.job(NS, j), "state")
            return {j: text(s) for j, s in zip(job_ids, pipe.execute())}
        except Exception:
            return None

    def pending(self) -> int | None:
        """Jobs waiting to be placed, as dispatch sees them; None if it cannot be asked."""
        try:
            return int(self.client().zcard(keys.jobs_pending(NS)))
        except Exception:
            return None

    def busy(self) -> int | None:
        """Jobs pending or running, as dispatch sees them; None if it cannot be asked."""
        try:
            return int(self.client().zcard(keys.jobs_pending(NS))) + int(self.client().zcard(keys.jobs_active(NS)))
        except Exception:
            return None

    # --- the end --------------------------------------------------------------------------------------

    def stop(self) -> None:
        if self.netnode and self.netnode.cut:
            self.netnode.heal()
        if self.disk:
            self.disk.free()
        for pid in self._paused.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._paused.clear()
        self.fleet.stop_all()
        if self.server is not None:
            self.server.stop()

    def teardown(self) -> None:
        if self.netnode:
            self.netnode.delete()
        try:  # the server's own log, before a tmpfs under it goes
            shutil.copy(self.data / "server.log", self.fleet.logs / "server.log")
        except OSError:
            pass
        if self.disk:
            self.disk.unmount()

"""`dispatch up`: one process that owns an embedded server, a scheduler and a node agent, and keeps
them running.

`up` holds the state directory's lock (up/lock.py) for its whole life, so a second `up` on that
directory refuses before it starts anything. Its server (unless --redis names another), its
scheduler (`dispatch scheduler`) and its node agent (`dispatch worker`) are child processes that
`up`'s main thread starts and watches. A child that exits without being asked to is started again
after a back-off (0.5 s, doubling up to 10 s, back to 0.5 s once it has run for a minute); the
server on the same port and data dir, and the scheduler and agent only once the server answers.
While the server is down `up` marks its record "restarting", and commands say so instead of
failing to connect. When the server cannot come back (MAX_START_FAILURES failed starts in a row:
its port taken, its data refused), or a child refuses its configuration (exit code 2 or 6), `up`
stops everything and exits non-zero with one line saying why.

Why processes and not the threads `up` used before: a thread cannot be restarted after a kill -9
nor killed alone; the RQ worker inside the agent claims the main thread's signals, so `up` could
not tell a stop it was asked for from an agent that merely returned; and a crashed scheduler
thread left `up` running with nothing scheduling. Each child gets SIGTERM from the kernel when
`up` dies (PR_SET_PDEATHSIG, so they are started from the main thread only), and runs in its own
session, so Ctrl-C reaches `up` alone, which stops them in order: scheduler, agent (it requeues
its jobs while the server still answers), server.

With its embedded server `up` is locked (up/secure.py): the server has a password per part (an ACL
file), identity is on (a lab secret in the state directory, the owner an admin, the owner's token
where the owner's commands find it), and only the owner can read any of it. `up --shared` also
answers logins of the host's other users on a Unix socket (auth/peer.py).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import config
from .embedded import EmbeddedServer, die_with_parent, free_port, port_free
from ..core.errors import EXIT_NO_GPU, EXIT_USAGE, ConfigError, DispatcherError, UpStopped, masked_url
from .aof import AofWatch, path_id
from .beside import requeue_beside, wait_requeued
from .lock import UpLock, clear_leftovers
from .secure import Secure
from .watchdog import SchedulerWatch

log = logging.getLogger("dispatch.up")

#: Back-off before a restart: BACKOFF_MIN_S, doubling up to BACKOFF_MAX_S; back to the minimum once
#: the part has run STABLE_S.
BACKOFF_MIN_S, BACKOFF_MAX_S, STABLE_S = 0.5, 10.0, 60.0
SERVER_BACKOFF_MAX_S = 2.0
#: Failed starts of the server in a row after which `up` stops.
MAX_START_FAILURES = 5
#: How often the main loop looks at its children.
POLL_S = 0.2
#: How long a child stopping may take once a second Ctrl-C hurries it (the agent kills its jobs and
#: records them requeued) before it is killed.
HURRY_S = 10.0
#: Exit codes of a child that refuses its configuration: restarting it cannot help.
FATAL_CODES = (EXIT_USAGE, EXIT_NO_GPU)


class Backoff:
    def __init__(self, max_s: float = BACKOFF_MAX_S):
        self.delay_s, self.max_s = BACKOFF_MIN_S, max_s

    def next(self, ran_s: float = 0.0) -> float:
        """The wait before the next start of a part that ran `ran_s` before it ended."""
        if ran_s >= STABLE_S:
            self.delay_s = BACKOFF_MIN_S
        delay, self.delay_s = self.delay_s, min(self.delay_s * 2, self.max_s)
        return delay


class Child:
    """A `dispatch` subcommand run and restarted by `up`."""

    def __init__(self, name: str, argv: list[str], env: dict):
        self.name, self.argv, self.env = name, argv, env
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.due: float | None = None  # when a restart is due, while it waits
        self.backoff = Backoff()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=die_with_parent())
        self.started, self.due = time.monotonic(), None

    def stop(self, timeout_s: float, more) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`. more() counts the signals `up` got since its stop
        began: after one, SIGTERM again (each second, in case two merge) and SIGKILL after HURRY_S at
        most (the agent kills its jobs at once and records them requeued); after two, SIGKILL now."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        deadline, nudged = time.monotonic() + timeout_s, None
        while self.proc.poll() is None and time.monotonic() < deadline and more() < 2:
            now = time.monotonic()
            if more() and (nudged is None or now - nudged >= 1.0):
                if nudged is None:
                    deadline = min(deadline, now + HURRY_S)
                nudged = now
                self.proc.terminate()
            time.sleep(0.05)
        if self.proc.poll() is None:
            log.warning("the %s (pid %d) did not stop; killing it", self.name, self.proc.pid)
            self.proc.kill()
            self.proc.wait()


def child_argv(command: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "dispatcher", command, *args]


class Up:
    """What `dispatch up` runs, once its flags are checked. run() blocks until a signal stops it
    (returns) or a part cannot run (raises UpStopped)."""

    def __init__(self, *, ns: str, url: str | None, port: int | None, fsync: str, scheduler_args: list[str],
                 agent_args: list[str], start_dashboard=None, secret_file: str | None = None,
                 admins: list[str] = (), socket_path: Path | None = None):
        """`url`: an external Redis, or None for the embedded server (locked); `start_dashboard(url)`
        returns something with shutdown(), or None. `secret_file`: the lab secret (with the embedded
        server, one is made in the state directory if none is given); `admins`: besides the owner.
        `socket_path`: `up --shared`'s login socket (None: not shared)."""
        self.ns, self.url, self.port, self.fsync = ns, url, port, fsync
        self.scheduler_args, self.agent_args = scheduler_args, agent_args
        self.start_dashboard = start_dashboard
        self.secret_file, self.admins, self.socket_path = secret_file, list(admins), socket_path
        self.secure: Secure | None = None
        self.logins = None
        self.state_dir = config.state_dir()
        self.data_dir = (self.state_dir / "data").resolve()
        self.lock = UpLock(self.state_dir)
        self.server: EmbeddedServer | None = None
        # every second without the server counts toward the agents' fence: retried sooner
        self.server_backoff = Backoff(max_s=SERVER_BACKOFF_MAX_S)
        self.server_since = 0.0
        self.server_due: float | None = None
        self.aof, self.aof_client = AofWatch(self.data_dir), None
        self.server_failures = 0
        self.children: list[Child] = []
        self.status = "starting"
        self.signals = 0
        self.failure: UpStopped | None = None
        self.started_at = time.time()

    # -- the record: the lock file always, server.json for the embedded server ----------------
    def record(self, status: str | None = None) -> None:
        self.status = status or self.status
        info = {"pid": os.getpid(), "status": self.status, "url": self.url, "started_at": self.started_at,
                "argv": [masked_url(a) if "://" in a else a for a in sys.argv], "state_dir": str(self.state_dir)}
        if self.server is not None:
            info.update(port=self.server.port, data_dir=str(self.data_dir), server_pid=self.server.pid,
                        namespace=self.ns, socket=str(self.socket_path) if self.socket_path else None)
        for child in self.children:
            info[f"{child.name.split()[-1]}_pid"] = child.pid
        try:
            self.lock.write({**info, "url": masked_url(self.url)})
            if self.server is not None:
                config.record_server(info)
        except (OSError, DispatcherError) as e:  # a full disk: said, not an internal error that stops it all
            why = getattr(e, "strerror", None) or e
            if self.status == "starting":
                raise ConfigError(f"cannot write the record of `dispatch up` in {self.state_dir} ({why}); make room "
                                  "there, or point DISPATCH_HOME at a directory that has some", key="DISPATCH_HOME") \
                    from None
            log.warning("cannot write the record of `dispatch up` in %s (%s); commands may see it out of date",
                        self.state_dir, why)

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1  # only a counter: taking a lock in a signal handler can deadlock the main thread

    def run(self) -> None:
        self.lock.acquire()  # UpAlreadyRunning: nothing started, nothing touched
        try:
            self.record("starting")  # a second `up` names this one, not the dead one it replaces
            # SIGINT even where it came ignored (a non-interactive shell's `up &`): kill -INT stops `up`
            # wherever it was started; but under nohup a hangup stops nothing
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                if sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN:
                    signal.signal(sig, self._on_signal)
            self._run()
        finally:
            self.lock.release()
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        clear_leftovers(self.lock.previous, self.data_dir)
        state_id = path_id(self.state_dir)
        dashboard = None
        try:
            embedded = self.url is None
            if embedded or self.secret_file:
                self.secure = Secure(self.state_dir, self.ns, self.secret_file).prepare(embedded)
            if self.socket_path is not None:  # first: a socket in use stops `up` before anything starts
                self._start_logins()
            if embedded:
                self._start_server()
            if self.signals:
                return
            if embedded:  # before any command connects (server.json says "running" after this)
                self.secure.publish(self.url, self._admins(embedded))
            self.children = self._children(embedded)
            for child in self.children:
                child.start()
            scheduler = self.children[0]
            watch = SchedulerWatch(scheduler.env["DISPATCH_REDIS_URL"], self.ns, config.Timing.from_env().lease_s)
            self.record("running")
            if self.start_dashboard is not None:
                dashboard = self.start_dashboard(self.url)
            print("dispatch: scheduler and node agent running; Ctrl-C stops everything", file=sys.stderr)
            while not self.signals and self.failure is None:
                time.sleep(POLL_S)
                if path_id(self.state_dir) != state_id:  # its lock, records and data went with it
                    self.failure = UpStopped("state", f"the state directory {self.state_dir} was removed while "
                                             "`dispatch up` ran, the server's data with it; stopped everything "
                                             "(start `dispatch up` again for a new one)")
                    break
                if self.server is not None:
                    self._watch_server()
                self._watch_children()
                if self.server_due is None and scheduler.due is None:
                    watch.check(scheduler)
        finally:
            self._shutdown(dashboard)

    def _start_server(self) -> None:
        port = self.port or _previous_port(self.lock.previous, self.data_dir) or free_port()
        self.server = EmbeddedServer(self.data_dir, port, fsync=self.fsync, die_with_parent=True,
                                     aclfile=self.secure.acl_path, password=self.secure.passwords["admin"])
        self.url = self.server.url
        self.record("starting")  # replaces what a dead `up` left in server.json
        self.server.start(timeout_s=60.0)
        self.server_since = time.monotonic()
        self.aof.started()
        print(f"dispatch: embedded server on {masked_url(self.server.url)}, data in {self.server.data_dir}",
              file=sys.stderr)

    def _children(self, embedded: bool) -> list[Child]:
        """The scheduler logs in as the leader role and the agent as the agent role (embedded
        server); both check identity when there is a secret."""
        identity = []
        if self.secure is not None:
            identity = self.secure.identity_flags(self._admins(embedded))

        def env(role: str) -> dict:
            url = self.secure.url_for(self.url, role) if embedded else self.url
            return dict(os.environ, DISPATCH_REDIS_URL=url, DISPATCH_NAMESPACE=self.ns)
        return [Child("scheduler", child_argv("scheduler", self.scheduler_args + identity), env("leader")),
                Child("node agent", child_argv("worker", self.agent_args + identity), env("agent"))]

    def _admins(self, embedded: bool) -> list[str]:
        """--admins, and with the embedded server its owner."""
        return list(dict.fromkeys(self.admins + ([self.secure.owner] if embedded else [])))

    def _start_logins(self) -> None:
        from ..auth.peer import LoginServer

        def issue(uid: int) -> dict:
            if self.url is None:
                raise LookupError("the server is starting; try again in a moment")
            return self.secure.issue(uid, self.url)
        self.logins = LoginServer(self.socket_path, issue).start()
        print(f"dispatch: shared: other users log in with `dispatch login {self.socket_path}`", file=sys.stderr)
        if os.geteuid() != 0:
            print(f"dispatch: warning: not running as root, so this node refuses the jobs of users other than "
                  f"{self.secure.owner}; run `dispatch up --shared` as root to run their jobs as them",
                  file=sys.stderr)

    def _watch_server(self) -> None:
        server, now = self.server, time.monotonic()
        if self.server_due is None:
            if server.proc.poll() is None:
                self._keep_aof()
                return
            delay = self.server_backoff.next(now - self.server_since)
            log.warning("the embedded server (pid %d) exited with code %s; restarting it on port %d in %.1fs",
                        server.pid, server.proc.returncode, server.port, delay)
            self.server_due = now + delay
            self.record("restarting")
            return
        if now < self.server_due:
            return
        if self.aof.lost():
            self.failure = UpStopped("server", f"the server's append-only files in {self.data_dir} were removed "
                                               "and it stopped before it could write them again: its jobs are gone "
                                               "with them, so no empty server is started in their place; stopped "
                                               "everything (restore the files, or start `dispatch up` again for an "
                                               "empty cluster)")
            return
        if not port_free(server.port):
            reason = f"port {server.port} is taken by another process"
        else:
            try:
                server.start(timeout_s=60.0)
            except DispatcherError as e:
                reason = str(e)
            else:
                self.server_failures, self.server_due, self.server_since = 0, None, time.monotonic()
                self.aof.started()
                self.record("running")
                log.warning("the embedded server is back on %s (pid %d)", masked_url(server.url), server.pid)
                return
        self.server_failures += 1
        if self.server_failures >= MAX_START_FAILURES:
            self.failure = UpStopped("server", f"the embedded server cannot come back on port {server.port} "
                                               f"({reason}; {self.server_failures} tries); stopped everything")
            return
        delay = self.server_backoff.next()
        log.warning("the embedded server did not start (%s); trying again in %.1fs", reason, delay)
        self.server_due = time.monotonic() + delay

    def _keep_aof(self) -> None:
        try:
            if self.aof_client is None:
                from ..store.connect import connect

                self.aof_client = connect(self.server.url, check=False, socket_timeout=5.0)
            self.aof.check(self.aof_client)
        except Exception as e:  # the server busy or going: the next poll looks again
            log.warning("could not check the server's append-only files (%s)", e)
            self.aof_client = None

    def _watch_children(self) -> None:
        now = time.monotonic()
        for child in self.children:
            code = child.proc.poll()
            if code is None:
                continue
            if child.due is None:
                if code in FATAL_CODES:
                    self.failure = UpStopped(child.name.split()[-1], f"the {child.name} exited with code {code} "
                                             "(it refuses its configuration; see its message above); "
                                             "stopped everything")
                    return
                delay = child.backoff.next(now - child.started)
                log.warning("the %s (pid %d) exited with code %s; restarting it in %.1fs", child.name, child.pid,
                            code, delay)
                child.due = now + delay
            elif now >= child.due and self.server_due is None:  # no use starting it without a server
                child.start()
                self.record()
                log.warning("the %s is running again (pid %d)", child.name, child.pid)

    def _shutdown(self, dashboard) -> None:
        """Scheduler first (nothing is placed while the agent requeues), then the agent, then the server.
        A second Ctrl-C or SIGTERM hurries what is still stopping (the agent's jobs are killed, and
        still requeued, not lost); a third kills it."""
        signals = self.signals

        def more() -> int:
            return self.signals - signals

        started = self.logins is not None or self.server is not None or bool(self.children)
        if self.logins is not None:
            self.logins.stop()
        if self.server is not None or self.children:
            self.record("stopping")
        asked = None
        for child, timeout_s in zip(self.children, (15.0, 60.0)):
            child.stop(timeout_s, more)
            if child is self.children[0] and self.server is not None:  # the scheduler stopped: nothing is placed
                asked = requeue_beside(child.env["DISPATCH_REDIS_URL"], self.ns)  # (before the server goes)
        wait_requeued(asked, self.ns, more)
        if dashboard is not None:
            dashboard.shutdown()
        if self.server is not None:
            config.forget_server(os.getpid())
            self.server.stop()
        if started and self.failure is None and sys.exc_info()[0] is None:  # (an error, or a refusal before
            print("dispatch: stopped", file=sys.stderr)  # anything started, is its one line alone)


def _previous_port(previous: dict, data_dir: Path) -> int | None:
    """The port the dead `up` of this data dir served on, if it is free: clients that kept its URL
    find the server again."""
    port = previous.get("port")
    if isinstance(port, int) and previous.get("data_dir") == str(data_dir) and port_free(port):
        return port
    return None

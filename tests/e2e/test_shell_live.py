"""`dispatch shell` and `dispatch attach` end to end, as a user at a terminal: the client runs on a real PTY of
the test's (a small expect helper), a real scheduler and agent (--fake-gpus) run the session on the agent's
own PTY, and the two meet only through Redis. The shell is bash without its rc files, its prompt "dsh$ "."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

from dispatcher.store.jobs import read_job

from .test_gangs_live import FAST

pytestmark = pytest.mark.slow

PROMPT = rb"dsh\$ $"
BASH = ("--", "bash", "--norc", "--noprofile")


class Term:
    """`dispatch ARGS` on a PTY of its own (rows x cols), read and typed into as a person would."""

    def __init__(self, cli, *args, rows: int = 30, cols: int = 100, **env):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        # (a terminal's foreground job, with Ctrl-C's default action: a suite run in the background of a
        # shell inherits SIGINT ignored, and a Ctrl-C that came before the client's own handlers was lost:
        # the client then waited for a GPU with nobody at it, test_a_ctrl_c_however_soon_... in CI)
        self.proc = subprocess.Popen([sys.executable, "-m", "dispatcher", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=cli.env(SHELL="/bin/bash", **env), start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(slave)
        cli.procs.append(self.proc)  # stopped at teardown with the agent, whatever the test did
        self.seen, self.pos = b"", 0

    def _more(self, timeout: float) -> bool:
        import select

        if not select.select([self.master], [], [], timeout)[0]:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the client exited and closed its side
            return False
        self.seen += data
        return bool(data)

    def expect(self, pattern: bytes, timeout: float = 15.0) -> re.Match:
        """The next match of `pattern` after the last one (re.M), waiting for the client's output."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.compile(pattern, re.M).search(self.seen, self.pos)
            if m:
                self.pos = m.end()
                return m
            if time.monotonic() > deadline or not self._more(min(0.2, deadline - time.monotonic())) \
                    and self.proc.poll() is not None and not self._more(0.2):
                raise AssertionError(f"no {pattern!r} within {timeout}s; the terminal shows:\n"
                                     f"{self.seen.decode(errors='replace')[-2000:]}")

    def type(self, text: str | bytes) -> None:
        os.write(self.master, text.encode() if isinstance(text, str) else text)

    def exit_code(self, timeout: float = 15.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._more(0.1)
        code = self.proc.wait(timeout=1)
        while self._more(0.05):
            pass
        os.close(self.master)
        return code


def only_job(client, ns: str) -> str:
    from dispatcher.store import keys

    (job_id,) = [i.decode() for i in client.zrange(keys.jobs_all(ns), 0, -1)]
    return job_id


def holders(cli) -> dict:
    """What holds each GPU, as `dispatch nodes --json` says: {node: {gpu index: job id or None}}."""
    return {n["name"]: {g["index"]: g["job"] for g in n["gpus"]} for n in json.loads(cli.run("nodes", "--json").stdout)}


@pytest.fixture
def node(cli, client, tmp_path):
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB", HOME=str(tmp_path), PS1="dsh$ ", **FAST)
    cli.start("scheduler", **FAST)
    return cli


def ended(cli, client, job_id: str, timeout: float = 15) -> dict:
    cli.wait_for(lambda: read_job(client, cli.ns, job_id)["state"] in ("succeeded", "failed", "cancelled"),
                 timeout=timeout, what=f"job {job_id} to end")
    return read_job(client, cli.ns, job_id)


def test_a_shell_on_a_gpu_gets_its_gpu_ctrl_c_and_exit_status_and_frees_the_gpu(node, client):
    t = Term(node, "shell", "--gpus", "1", *BASH)
    t.expect(PROMPT)
    job_id = only_job(client, node.ns)
    job = read_job(client, node.ns, job_id)
    assert job["state"] == "running" and job["priority"] == "high", job
    assert holders(node)["n1"][job["gpus"][0]] == job_id
    t.type("echo gpu=$CUDA_VISIBLE_DEVICES rows=$(tput lines) tty=$(tty)\r")
    m = t.expect(rb"gpu=(\d+) rows=(\d+) tty=(/dev/pts/\d+)")
    assert [int(m.group(1))] == job["gpus"] and m.group(2) == b"30", m.group(0)  # its GPU; the client's size
    t.expect(PROMPT)

    t.type("sleep 100; echo slept\r")
    t.expect(rb"sleep 100; echo slept\r\n")
    time.sleep(0.5)
    started = time.monotonic()
    t.type(b"\x03")  # Ctrl-C: to the program on the node, not to the client
    t.expect(PROMPT)
    assert time.monotonic() - started < 5 and b"slept" not in t.seen[t.pos - 200:]
    assert t.proc.poll() is None

    t.type("exit 3\r")
    assert t.exit_code() == 3
    job = ended(node, client, job_id)
    assert (job["state"], job["exit_code"], job["reason"]) == ("failed", 3, "exit code 3"), job
    assert holders(node) == {"n1": {0: None, 1: None}}
    assert "gpu=" in node.run("logs", job_id).stdout  # the session's output is the job's log too
    p = node.run("attach", job_id, check=False)  # it ended: one line that says so and where its output is
    assert (p.returncode, p.stderr.strip()) == (1, f"dispatch: error: job {job_id} is failed (exit code 3); cannot "
                                                f"attach to it (its output: dispatch logs {job_id})"), p.stderr


def test_a_killed_client_leaves_the_shell_running_and_attach_takes_it_up(node, client):
    t = Term(node, "shell", "--gpus", "1")  # the client's $SHELL: /bin/bash, its prompt the host's
    t.expect(rb"[$#] $")
    job_id = only_job(client, node.ns)
    t.type("echo before-$((6*7))\r")
    t.expect(rb"before-42")
    t.proc.kill()  # kill -9: the laptop's lid closed
    t.exit_code()
    time.sleep(1)
    assert read_job(client, node.ns, job_id)["state"] == "running"

    a = Term(node, "attach", job_id)
    a.expect(rb"before-42")  # the last screenful
    a.type("echo after-$((7*7))\r")
    a.expect(rb"after-49")
    a.type("exit\r")
    assert a.exit_code() == 0
    job = ended(node, client, job_id)
    assert (job["state"], job["exit_code"]) == ("succeeded", 0), job


def test_a_client_whose_terminal_closes_while_it_waits_cancels_its_job(node, client):
    # both GPUs busy: the shell waits; then its terminal goes away (SIGHUP), as a closed window does
    busy = node.submit("--gpus", "2", "--", "sleep", "60")
    node.wait_for(lambda: read_job(client, node.ns, busy)["state"] == "running", what="the blocker to run")
    t = Term(node, "shell", "--gpus", "1", *BASH)
    t.expect(rb"waiting for a GPU: job (\d+)")
    job_id = t.seen.split(b"waiting for a GPU: job ")[1].split()[0].decode()
    os.killpg(t.proc.pid, signal.SIGHUP)
    assert t.exit_code() != 0
    job = ended(node, client, job_id)
    assert job["state"] == "cancelled", job  # not left to start later with nobody at its terminal


def test_a_client_killed_outright_while_it_waits_gets_no_session_started_for_nobody(node, client):
    # kill -9 of the waiting client (its host gone): no hangup, no Ctrl-C, nothing cancelled it, and the session
    # started later with nobody there, holding its GPU until its idle timeout (an hour)
    from dispatcher.store import tty as streams

    busy = node.submit("--gpus", "2", "--", "sleep", str(int(streams.CLIENT_GONE_S) + 10))
    node.wait_for(lambda: read_job(client, node.ns, busy)["state"] == "running", what="the blocker to run")
    t = Term(node, "shell", "--gpus", "1", *BASH)
    t.expect(rb"waiting for a GPU: job (\d+)")
    job_id = t.seen.split(b"waiting for a GPU: job ")[1].split()[0].decode()
    t.proc.kill()
    t.exit_code()
    job = ended(node, client, job_id, timeout=streams.CLIENT_GONE_S + 40)
    assert job["state"] == "cancelled" and "client went away while it waited" in job["reason"], job
    assert job["started_at"] is None


def test_a_session_that_prints_is_at_work_not_idle(node, client):
    # `dispatch shell -- python train.py`, printing its progress with nobody typing, was ended as idle
    t = Term(node, "shell", "--idle-timeout", "2s", "--", "sh", "-c", "for i in 1 2 3 4 5; do echo step $i; sleep 1; done")
    t.expect(rb"step 5", timeout=20)
    assert t.exit_code() == 0
    job = ended(node, client, only_job(client, node.ns))
    assert job["state"] == "succeeded", job


def test_an_untouched_session_ends_at_its_idle_timeout(node, client):
    t = Term(node, "shell", "--idle-timeout", "2s", *BASH)
    t.expect(PROMPT)
    job_id = only_job(client, node.ns)
    t.expect(rb"interactive session idle for 2s", timeout=10)
    assert t.exit_code() != 0
    job = ended(node, client, job_id)
    assert (job["state"], job["reason"]) == ("failed", "interactive session idle for 2s"), job


def test_a_bad_flag_or_job_is_one_line(node, client):
    for args, says in ((("shell", "--gpus", "1-4"), "--gpus: an interactive session takes one number"),
                       (("shell", "--idle-timeout", "soon"), "--idle-timeout: 'soon' is not a duration"),
                       (("shell", "--gpus", "1", "--bogus"), "No such option"),
                       (("attach", "999"), "999")):
        p = node.run(*args, check=False)
        assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and says in p.stderr, (args, p.stderr)
    batch = node.submit("--", "true")
    p = node.run("attach", batch, check=False)
    assert p.returncode != 0 and "no interactive session" in p.stderr, p.stderr


def test_under_identity_only_the_owners_signed_keystrokes_reach_the_shell(cli, client, tmp_path):
    from dispatcher.store import keys
    from dispatcher.store.requests import identity_on
    from dispatcher.store.tty import Signer, send_input

    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    cli.start("scheduler", "--secret-file", str(secret), **FAST)
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--secret-file", str(secret), PS1="dsh$ ",
              **FAST)
    cli.wait_for(lambda: identity_on(client, cli.ns), what="the scheduler to turn identity on")
    token = {u: cli.run("auth", "token", u, "--secret-file", str(secret)).stdout.strip() for u in ("alice", "bob")}
    t = Term(cli, "shell", "--gpus", "1", *BASH, DISPATCH_USER="alice", DISPATCH_TOKEN=token["alice"])
    t.expect(PROMPT)
    job_id = only_job(client, cli.ns)
    client.xadd(keys.job_tty(cli.ns, job_id, "in"), {"k": "in", "d": b"echo unsigned-$((1+1))\r"})
    send_input(client, cli.ns, job_id, "in", b"echo bob-$((2+2))\r", signer=Signer("bob", token["bob"], job_id))
    time.sleep(1)
    t.type("echo alice-$((3+3))\r")
    t.expect(rb"alice-6")
    t.expect(PROMPT)
    for _, fields in client.xrange(keys.job_tty(cli.ns, job_id, "in")):  # a replay of what alice sent
        if fields.get(b"u") == b"alice":
            client.xadd(keys.job_tty(cli.ns, job_id, "in"), fields)
    time.sleep(1)
    t.type("echo do''ne\r")  # (what comes back is "done"; the echo of the line is not)
    t.expect(rb"done")
    assert b"unsigned-2" not in t.seen and b"bob-4" not in t.seen and t.seen.count(b"alice-6") == 1, t.seen
    t.type("exit\r")
    assert t.exit_code() == 0
    assert read_job(client, cli.ns, job_id)["user"] == "alice"


def test_attach_takes_an_element_id_as_show_and_logs_do(cli):
    array = cli.submit("--array", "0-2", "--", "true")
    p = cli.run("attach", f"{array}_1", check=False)
    element = str(int(array) + 1)
    assert p.returncode != 0 and p.stderr.strip() == (
        f"dispatch: error: job {element} is no interactive session (dispatch shell); follow its output with "
        f"dispatch logs -f {element}"), p.stderr


def test_a_shell_asking_more_gpus_than_any_node_has_waits_and_never_runs_on_several_nodes(cli, client, tmp_path):
    """QA: `dispatch shell --gpus 2` on 1-GPU nodes started as a gang of whole nodes: a shell on each node,
    both reading every keystroke and writing to the one terminal (each command ran twice, on two hosts).
    A session is on one node: it waits as a job no node could ever hold, and says so."""
    for name in ("n1", "n2"):
        cli.start("worker", "--node", name, "--fake-gpus", "1xA100-40GB", HOME=str(tmp_path), PS1="dsh$ ", **FAST)
    cli.start("scheduler", **FAST)
    cli.wait_for(lambda: len(holders(cli)) == 2, what="both nodes to register")
    t = Term(cli, "shell", "--gpus", "2", *BASH)
    t.expect(rb"no registered node could ever hold it")
    t.expect(rb"waiting for a GPU: job \d+")
    job_id = only_job(client, cli.ns)
    cli.wait_for(lambda: "could ever hold" in (read_job(client, cli.ns, job_id)["reason"] or ""),
                 what="the scheduler's verdict")
    job = read_job(client, cli.ns, job_id)
    assert job["state"] == "pending" and job["ranks"] in ([], None), job
    os.killpg(t.proc.pid, signal.SIGINT)  # Ctrl-C while it waits: cancelled
    assert t.exit_code(timeout=45) == 130  # the cancel waits for the scheduler's answer (up to 15 s, then withdrawn)
    assert ended(cli, client, job_id)["state"] == "cancelled"


def test_a_shell_fed_from_a_file_gives_back_its_output_alone_and_its_exit_as_ssh_does(node, client, tmp_path):
    steps = tmp_path / "steps.sh"
    steps.write_text("echo CVD=$CUDA_VISIBLE_DEVICES\nfor i in 1 2; do echo line $i; done\nexit 3\n")
    with open(steps) as f:  # no terminal: no echo of the input, no prompts, no CR LF (it was all of them)
        p = subprocess.run([sys.executable, "-m", "dispatcher", "shell", "--gpus", "1"], stdin=f, capture_output=True,
                           text=True, timeout=60, env=node.env(SHELL="/bin/bash"))
    assert (p.returncode, p.stdout) == (3, "CVD=0\nline 1\nline 2\n"), p


def test_a_shell_fed_from_a_pipe_ends_at_the_end_of_its_input_as_ssh_does(node, client):
    p = subprocess.run([sys.executable, "-m", "dispatcher", "shell", "--gpus", "1", *BASH], input="echo piped-$((6*7))\n",
                       capture_output=True, text=True, timeout=60, env=node.env(SHELL="/bin/bash"))
    assert p.returncode == 0 and "piped-42" in p.stdout, p  # the input's end is the terminal's ^D: bash exits
    (job_id,) = [j for j in [only_job(client, node.ns)]]
    assert ended(node, client, job_id)["state"] == "succeeded"


def test_a_ctrl_c_however_soon_after_shell_starts_leaves_no_job_behind(node, client):
    busy = node.submit("--gpus", "2", "--", "sleep", "60")  # the sessions wait: a Ctrl-C is the terminal's SIGINT
    node.wait_for(lambda: read_job(client, node.ns, busy)["state"] == "running", what="the blocker to run")
    for delay in (0.2, 0.3, 0.4, 0.5, 0.6, 0.8):  # (around the submission: before it, as it answers, after)
        t = Term(node, "shell", "--gpus", "1", *BASH)
        time.sleep(delay)
        os.killpg(t.proc.pid, signal.SIGINT)
        # (a Ctrl-C held through the submission waits for the leader's answer, up to 15 s, then its cancel's:
        # on a loaded machine more than exit_code's usual 15 s)
        try:
            code = t.exit_code(timeout=45.0)
        except subprocess.TimeoutExpired:  # (seen twice in CI, never alone: say where the client was)
            masks = [line for line in open(f"/proc/{t.proc.pid}/status") if line.startswith(("Sig", "ShdPnd"))]
            pytest.fail(f"the client got SIGINT {delay}s after it started and had not exited 46 s later; "
                        f"its signal masks: {' '.join(m.strip() for m in masks)}; "
                        f"its terminal:\n{t.seen.decode(errors='replace')[-1500:]}\nqueue: "
                        f"{node.run('queue', '--all', check=False).stdout}")
        assert code != 0
    sessions = [j for j in json.loads(node.run("queue", "--all", "--json").stdout) if j["id"] != busy]
    assert {j["state"] for j in sessions} <= {"cancelled"}, sessions  # was: one left pending, its id never said


def test_a_session_whose_agent_stops_ends_rather_than_rerun_with_nobody_at_it(node, client):
    t = Term(node, "shell", "--gpus", "1", *BASH)
    t.expect(PROMPT)
    job_id = only_job(client, node.ns)
    agent = node.procs[0]
    agent.send_signal(signal.SIGTERM)  # as `dispatch up` stopping does: its jobs would go back to the queue
    agent.wait(timeout=30)
    job = ended(node, client, job_id)
    assert (job["state"], job["reason"]) == ("failed", "node n1 agent stopped; an interactive session is not run "
                                                      "again (dispatch shell starts a new one)"), job
    t.expect(rb"not run again", timeout=10)


def test_a_client_stopped_by_a_signal_says_the_session_runs_on_and_how_to_take_it_up(node, client):
    t = Term(node, "shell", "--gpus", "1", *BASH)
    t.expect(PROMPT)
    job_id = only_job(client, node.ns)
    t.proc.send_signal(signal.SIGTERM)
    t.expect(rb"SIGTERM: this client stops; the session runs on: dispatch attach " + job_id.encode())
    assert t.exit_code() == 128 + signal.SIGTERM
    assert read_job(client, node.ns, job_id)["state"] == "running"
    node.run("cancel", job_id)

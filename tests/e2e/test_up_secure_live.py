"""`dispatch up` is locked by default: its state is its owner's alone, its server wants a password,
identity is on and the owner's commands just work. `dispatch up --shared` lets the host's other users
log in through a Unix socket, each as who the kernel says they are. (Attacks by a second real Unix
account are in tests/security/.)"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from dispatcher.core import errors

from ..processes import stop_processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DISPATCH = [sys.executable, "-m", "dispatcher"]
UP = ["up", "--fake-gpus", "2xA100-40GB", "--node", "box", "--no-dashboard"]
PRIVATE = ("server.json", "up.lock", "secrets.json", "users.acl", "secret", "token")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


class Host:
    """One user's shell on the host: a state dir and a config dir of their own."""

    def __init__(self, root: Path, name: str):
        self.state, self.config = root / name / "state", root / name / "config"
        self.logs = root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
        env.update(DISPATCH_HOME=str(self.state), XDG_CONFIG_HOME=str(self.config), PYTHONUNBUFFERED="1")
        return env

    def start_up(self, *flags) -> subprocess.Popen:
        log = open(self.logs / f"up-{len(self.procs)}.log", "wb")
        p = subprocess.Popen(DISPATCH + UP + list(flags), env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, *args, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(DISPATCH + list(args), env=self.env(), capture_output=True, text=True,
                              timeout=timeout)

    def ok(self, *args) -> str:
        p = self.run(*args)
        assert p.returncode == 0, f"dispatch {' '.join(args)}: {p.stderr}{self.show_logs()}"
        return p.stdout

    def show_logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.logs.glob("*.log")))

    def record(self) -> dict:
        try:
            return json.loads((self.state / "server.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait_running(self, up: subprocess.Popen) -> dict:
        def running():
            assert up.poll() is None, f"up exited with {up.returncode}\n{self.show_logs()}"
            rec = self.record()
            return rec if rec.get("pid") == up.pid and rec.get("status") == "running" else None
        return wait_for(running, 30, "up to record its server running", self.show_logs)

    def run_job(self, *args) -> dict:
        job = self.ok("submit", *args).strip()
        self.run("wait", job, "--timeout", "30")
        return json.loads(self.ok("show", job, "--json"))


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def command_lines() -> str:
    """Every process's command line, as `ps` shows them to any user."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            out.append(entry.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(out)


@pytest.fixture
def owner(tmp_path):
    h = Host(tmp_path, "owner")
    yield h
    stop_processes(h.procs, timeout_s=30)


@pytest.fixture
def socket_dir():
    """Where `up --shared` listens: under /tmp itself, as by default, so another uid could reach it."""
    path = Path(tempfile.mkdtemp(prefix="dsp-up-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_default_up_is_its_owners_alone_and_the_owners_commands_just_work(owner):
    owner.state.mkdir(parents=True, mode=0o755)
    owner.state.chmod(0o755)  # as an older dispatch left it
    up = owner.start_up()
    rec = owner.wait_running(up)

    assert mode(owner.state) == 0o700
    for name in PRIVATE:
        assert mode(owner.state / name) == 0o600, name
    url = urlsplit(rec["url"])
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=url.port, socket_timeout=5).ping()
    passwords = json.loads((owner.state / "secrets.json").read_text())
    assert url.password == passwords["admin"] and set(passwords) >= {"admin", "leader", "agent", "user"}
    lines = command_lines()
    assert not [pw for pw in passwords.values() if pw in lines]  # no password on a command line
    admin = redis.Redis.from_url(rec["url"], socket_timeout=5)
    logins = {c["user"] for c in admin.client_list()}
    assert {"dispatch-leader", "dispatch-agent"} <= logins, logins  # the parts log in as their roles

    me = json.loads((owner.state / "token").read_text())["user"]
    job = owner.run_job("--", "sh", "-c", "id -un")
    assert (job["state"], job["user"]) == ("succeeded", me), job
    assert owner.ok("logs", str(job["id"])).split() == [me]  # the owner's job runs as the owner
    long = owner.ok("submit", "--", "sleep", "30").strip()
    wait_for(lambda: json.loads(owner.ok("show", long, "--json"))["state"] == "running", 20, "the long job",
             owner.show_logs)
    assert f"{long} " in owner.ok("queue")
    assert "preemption sent" in owner.ok("preempt", "--force", long)
    assert "cancel" in owner.ok("cancel", long)

    second = owner.run(*UP, timeout=30)
    line = one_line(second.stderr)
    assert second.returncode != 0 and f"pid {up.pid}" in line and url.password not in line, line
    assert up.poll() is None and owner.record()["pid"] == up.pid


def test_up_shared_hands_each_local_user_a_login_of_their_own(owner, socket_dir, tmp_path):
    sock = socket_dir / "dispatch.sock"
    up = owner.start_up("--shared", "--socket", str(sock), "--allow-root-jobs")
    owner.wait_running(up)
    assert mode(socket_dir) == 0o755 and mode(sock) == 0o666 and stat.S_ISSOCK(os.stat(sock).st_mode)

    user = Host(tmp_path, "user")  # no `up` of their own: the login is what gives them a server
    out = user.ok("login", str(sock))
    me = json.loads((owner.state / "token").read_text())["user"]
    assert out.strip() == f"logged in to {me}'s dispatch as {me} (namespace dispatch)"
    login = json.loads((user.config / "dispatch" / "login.json").read_text())
    assert mode(user.config / "dispatch") == 0o700 and mode(user.config / "dispatch" / "login.json") == 0o600
    assert urlsplit(login["url"]).username == "dispatch-user" and login["user"] == me
    with pytest.raises(redis.exceptions.NoPermissionError):  # the user role writes nothing itself
        redis.Redis.from_url(login["url"], socket_timeout=5).hset("dispatch:job:1", "state", "succeeded")
    job = user.run_job("--", "true")
    assert (job["state"], job["user"]) == ("succeeded", me), job
    assert f"issued a token to {me}" in owner.show_logs()

    up.terminate()
    up.wait(60)
    assert not sock.exists()
    gone = user.run("queue")
    assert gone.returncode == errors.EXIT_CONNECT and "dispatch login" in one_line(gone.stderr), gone.stderr


def test_up_shared_refuses_what_it_cannot_make_safe_in_one_line(owner, socket_dir):
    with_redis = owner.run(*UP, "--shared", "--redis", "redis://127.0.0.1:1/0", timeout=30)
    assert with_redis.returncode == errors.EXIT_USAGE and "--shared" in one_line(with_redis.stderr)
    socket_dir.chmod(0o777)
    open_dir = owner.run(*UP, "--shared", "--socket", str(socket_dir / "d.sock"), timeout=30)
    line = one_line(open_dir.stderr)
    assert open_dir.returncode == errors.EXIT_USAGE and "writable by group or others" in line, line
    assert not (owner.state / "server.json").exists()


def test_login_refuses_a_socket_anyone_could_have_put_there(tmp_path, socket_dir):
    socket_dir.chmod(0o777)
    fake = socket.socket(socket.AF_UNIX)
    fake.bind(str(socket_dir / "dispatch.sock"))
    fake.listen(1)
    try:
        p = Host(tmp_path, "user").run("login", str(socket_dir / "dispatch.sock"))
    finally:
        fake.close()
    line = one_line(p.stderr)
    assert p.returncode == errors.EXIT_USAGE and "anyone could have put it there" in line, line
    assert not (tmp_path / "user" / "config" / "dispatch" / "login.json").exists()

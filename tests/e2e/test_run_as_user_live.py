"""Node agents started as root run each job as its submitting Unix user (Slurm's model), with identity
on, so that nobody runs a job as someone else; an agent that is not root runs only its own user's."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from dispatcher.store.requests import identity_on

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="--run-as-user needs the agent to run as root")]

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def reachable_dir():
    """A directory under /tmp that a job run as nobody can reach (pytest's tmp_path is root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="dispatch-ras-", dir="/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def lab(cli, tmp_path, client, reachable_dir):
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    cli.start("scheduler", "--secret-file", str(secret))
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(reachable_dir / "n1"),
              "--run-as-user", "--secret-file", str(secret), DISPATCH_ALLOW_ROOT_JOBS="")  # root's jobs refused
    cli.wait_for(lambda: identity_on(client, cli.ns), what="the scheduler to turn identity on")
    return secret


def as_user(cli, secret, user):
    token = cli.run("auth", "token", user, "--secret-file", str(secret)).stdout.strip()
    return {"DISPATCH_USER": user, "DISPATCH_TOKEN": token}


@pytest.fixture
def nobody_python(reachable_dir):
    """(interpreter, PYTHONPATH or None) that run this project as nobody: this interpreter if nobody may
    run it, else the system's of the same version with this checkout and its site-packages on the
    path (and, for a system Python older than 3.11.3, a one-line async_timeout for redis-py to import;
    the sync client the agent uses never calls it)."""
    import site
    import sysconfig

    shim = reachable_dir / "shim"
    shim.mkdir()
    (shim / "async_timeout.py").write_text("from asyncio import timeout, timeout_at  # noqa: F401\n")
    path = os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(shim), *site.getsitepackages()])
    system = shutil.which(f"python{sysconfig.get_python_version()}", path="/usr/local/bin:/usr/bin:/bin")
    for exe, pythonpath in [(sys.executable, None), *([(system, path)] if system else [])]:
        env = dict(os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {}))
        check = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups", exe, "-c",
                 "import dispatcher.cli, redis, rq, msgpack"]
        if subprocess.run(check, capture_output=True, cwd="/", env=env).returncode == 0:
            return exe, pythonpath
    pytest.skip("no Python with this project's packages that nobody may run")


def in_shell(nobody_python) -> str:
    exe, pythonpath = nobody_python
    return shlex.quote(exe) if pythonpath is None else f"env PYTHONPATH={shlex.quote(pythonpath)} {shlex.quote(exe)}"


def submit(cli, env, *args):
    return cli.run("submit", *args, **env).stdout.strip()


def ended(cli, job, what):
    cli.wait_for(lambda: cli.show(job)["state"] in ("succeeded", "failed", "cancelled"), what=what)
    return cli.show(job)


def test_a_job_runs_as_its_user_with_its_files_and_an_unknown_user_or_root_fails(cli, lab, reachable_dir):
    mine = submit(cli, as_user(cli, lab, "nobody"), "--cwd", "/", "--", "sh", "-c", "id -un; echo $HOME")
    assert ended(cli, mine, "nobody's job")["state"] == "succeeded"
    assert cli.run("logs", mine).stdout.split() == ["nobody", "/nonexistent"]
    log, ckpt = reachable_dir / "n1" / "logs" / f"{mine}.log", reachable_dir / "n1" / "checkpoints" / mine
    assert (log.stat().st_uid, log.stat().st_mode & 0o777) == (NOBODY.pw_uid, 0o600)
    assert (ckpt.stat().st_uid, ckpt.stat().st_mode & 0o777) == (NOBODY.pw_uid, 0o700)

    ghost = submit(cli, as_user(cli, lab, "no-such-user-x"), "--cwd", "/", "--", "true")
    assert "no Unix user 'no-such-user-x'" in ended(cli, ghost, "the unknown user's job to fail")["reason"]
    root = submit(cli, as_user(cli, lab, "root"), "--cwd", "/", "--", "true")
    assert "not run as root" in ended(cli, root, "root's job to be refused")["reason"]


def test_a_working_directory_its_user_may_not_enter_fails_the_job_and_runs_nothing(cli, lab, reachable_dir):
    marker = reachable_dir / f"ran-{uuid.uuid4().hex[:6]}"
    reachable_dir.chmod(0o1777)  # nobody could write the marker, had the job run
    job = submit(cli, as_user(cli, lab, "nobody"), "--cwd", "/root", "--", "sh", "-c", f"echo ran > {marker}")
    got = ended(cli, job, "the job in /root to fail")
    assert got["state"] == "failed"
    assert "cannot enter working directory /root as nobody: Permission denied" in got["reason"]
    assert not marker.exists()


def test_a_job_run_as_its_user_checkpoints_and_submits_as_that_user_through_its_agent(cli, lab, nobody_python):
    py = in_shell(nobody_python)
    script = f"{py} -m dispatcher checkpointed && {py} -m dispatcher submit --cwd / -- id -un"
    parent = submit(cli, as_user(cli, lab, "nobody"), "--cwd", "/", "--", "sh", "-c", script)
    got = ended(cli, parent, "nobody's parent job")
    out = cli.run("logs", parent).stdout
    assert got["state"] == "succeeded" and got["checkpoint_at"], out
    child = out.split()[-1]
    assert ended(cli, child, "the follow-up job")["user"] == "nobody"
    assert cli.run("logs", child).stdout.split() == ["nobody"]

    other = submit(cli, as_user(cli, lab, "nobody"), "--cwd", "/", "--",
                   "sh", "-c", f"{py} -m dispatcher submit --user daemon -- true")
    assert ended(cli, other, "the job that submits as another user")["state"] == "failed"
    assert "not daemon's" in cli.run("logs", other).stdout


def test_an_agent_that_is_not_root_runs_only_its_own_users_jobs(cli, client, reachable_dir, nobody_python):
    secret = reachable_dir / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    os.chown(secret, NOBODY.pw_uid, NOBODY.pw_gid)
    home = reachable_dir / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    cli.start("scheduler", "--secret-file", str(secret))
    exe, path = nobody_python
    pythonpath = {"PYTHONPATH": path} if path else {}
    log = open(cli.home / "nobody-agent-0.log", "wb")
    cli.procs.append(subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups", exe, "-m",
         "dispatcher", "worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(home / "n1"),
         "--secret-file", str(secret)], env=cli.env(DISPATCH_HOME=str(home), HOME=str(home), **pythonpath), cwd="/",
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    cli.wait_for(lambda: identity_on(client, cli.ns), what="the scheduler to turn identity on")
    own = submit(cli, as_user(cli, secret, "nobody"), "--cwd", "/", "--", "id", "-un")
    got = ended(cli, own, "the agent's own user's job")
    assert got["state"] == "succeeded", got["reason"]
    assert cli.run("logs", own).stdout.split() == ["nobody"]
    theirs = submit(cli, as_user(cli, secret, "alice"), "--cwd", "/", "--", "id", "-un")
    got = ended(cli, theirs, "alice's job to be refused")
    assert got["state"] == "failed" and "agent runs as nobody and cannot run a job of alice" in got["reason"]
    assert cli.run("logs", theirs).stdout == ""


def test_an_output_file_and_a_notify_command_are_their_users_and_a_file_not_theirs_is_not_written(
        cli, lab, reachable_dir):
    home = reachable_dir / "nobody-home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    env = as_user(cli, lab, "nobody")
    job = submit(cli, env, "--cwd", str(home), "--output", "out/%u-%j.txt", "--notify", 'sh -c "id -un > told"',
                 "--", "echo", "hi")
    assert ended(cli, job, "the job with --output")["state"] == "succeeded"
    out = home / "out" / f"nobody-{job}.txt"
    assert out.read_text() == "hi\n"
    assert out.stat().st_uid == out.parent.stat().st_uid == NOBODY.pw_uid
    cli.wait_for(lambda: (home / "told").exists(), what="the --notify command")
    assert (home / "told").read_text() == "nobody\n" and (home / "told").stat().st_uid == NOBODY.pw_uid
    elsewhere = submit(cli, env, "--cwd", str(home), "--output", "/etc/dispatch-%j.txt", "--", "echo", "still")
    assert ended(cli, elsewhere, "the job whose --output is not its user's")["state"] == "succeeded"
    assert not Path(f"/etc/dispatch-{elsewhere}.txt").exists()
    assert cli.run("logs", elsewhere).stdout.splitlines() == [
        f"[dispatch: cannot write --output /etc/dispatch-{elsewhere}.txt on n1: a directory on the way is not the "
        f"job user's; the output goes to `dispatch logs` only]", "still"]

"""`dispatch up --shared`, run by root on a lab's login host: every local user may submit, with
identity on and no way to act as someone else. The attacker, mallory, is an ordinary user with a
login of her own; every attack the issue found is tried and must be refused, with its reason."""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from pathlib import Path

import msgpack
import pytest
import redis

from dispatcher.store import keys
from dispatcher.store.connect import text

from tests.processes import stop_processes

from .conftest import Account, wait

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def shared(users, tmp_path):
    """Root's `up --shared`; alice and mallory logged in. Returns the namespace."""
    root = Account("root", users["alice"].logs)
    socket_dir = f"/tmp/dsp-{secrets.token_hex(4)}"
    socket = f"{socket_dir}/dispatch.sock"
    home = tmp_path / "root-home"
    root.home, root.socket_dir = home, Path(socket_dir)
    home.mkdir()
    root.start("up", "--shared", "--socket", socket, "--fake-gpus", "2xA100-40GB", "--cpus", "4",
               "--no-dashboard", DISPATCH_HOME=str(home / "state"))
    users["root"] = root
    wait(lambda: users["alice"].run("login", socket).returncode == 0, "root's up --shared to answer", root.logs)
    assert "as dsp-mallory" in users["mallory"].ok("login", socket)
    yield users["alice"].login_file()["namespace"]
    stop_processes(root.procs)
    shutil.rmtree(socket_dir, ignore_errors=True)


def state_of(user: Account, job: str) -> str:
    return json.loads(user.ok("show", job, "--json"))["state"]


def running_job(alice: Account) -> str:
    job = alice.ok("submit", "--", "sleep", "120").strip()
    wait(lambda: state_of(alice, job) == "running", "alice's job to run", alice.logs)
    return job


def refused(p, *reasons) -> str:
    assert p.returncode != 0, p.stdout
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert any(r in p.stderr for r in reasons), p.stderr
    return p.stderr.strip()


def mallorys_redis(mallory: Account) -> redis.Redis:
    """The Redis login `dispatch login` gave mallory (the user role), used straight."""
    return redis.Redis.from_url(mallory.login_file()["url"], socket_timeout=10)


def admin(root: Account) -> redis.Redis:
    server = json.loads((root.home / "state" / "server.json").read_text())
    return redis.Redis.from_url(server["url"], socket_timeout=10)


def test_jobs_run_as_their_user_and_nobody_acts_for_another(users, shared):
    alice, mallory = users["alice"], users["mallory"]
    job = alice.ok("submit", "--", "id", "-un").strip()
    wait(lambda: state_of(alice, job) == "succeeded", "alice's job", alice.logs)
    assert alice.ok("logs", job).strip() == "dsp-alice"

    long = running_job(alice)
    print(refused(mallory.run("cancel", long), "belongs to dsp-alice"))
    print(refused(mallory.run("preempt", long), "belongs to dsp-alice"))
    print(refused(mallory.run("submit", "--user", "dsp-alice", "--", "id"), "may not submit a job as"))
    forged = mallory.run("submit", "--", "id", DISPATCH_USER="dsp-alice")  # a user name is not an identity
    if forged.returncode == 0:
        assert json.loads(mallory.ok("show", forged.stdout.strip(), "--json"))["user"] == "dsp-mallory"
        print("DISPATCH_USER=dsp-alice: submitted as dsp-mallory (the login's user)")
    else:
        print(refused(forged, "signature does not match", "may not"))
    assert state_of(alice, long) == "running"


def test_the_user_login_writes_nothing_but_signed_requests(users, shared):
    alice, mallory = users["alice"], users["mallory"]
    ns, long = shared, running_job(users["alice"])
    node = json.loads(alice.ok("show", long, "--json"))["node"]
    r = mallorys_redis(mallory)
    attacks = {
        "cancel through the node's control stream": lambda: r.xadd(keys.node_control(ns, node),
                                                                   {"type": "cancel", "job": long}),
        "wipe alice's log": lambda: r.xadd(keys.job_log(ns, long), {"data": b""}, maxlen=0),
        "rewrite alice's job": lambda: r.hset(keys.job(ns, long), "state", "pending"),
        "poison the pending index": lambda: r.zadd(keys.jobs_pending(ns), {long: float("inf")}),
        "run a script": lambda: r.eval("return redis.call('DEL', KEYS[1])", 1, keys.job(ns, long)),
        "delete a record": lambda: r.delete(keys.job(ns, long)),
        "flush everything": lambda: r.flushall(),
        "make herself admin": lambda: r.execute_command("ACL", "SETUSER", "default", "nopass"),
    }
    for what, attack in attacks.items():
        with pytest.raises(redis.exceptions.NoPermissionError) as refused:
            attack()
            pytest.fail(f"mallory could {what}")
        print(f"mallory tries to {what}: {refused.value}")
    assert state_of(alice, long) == "running", alice.ok("show", long)
    for read in (("show", long), ("logs", long), ("queue",), ("nodes",), ("top", "--once"), ("why", long),
                 ("eta", long)):
        mallory.ok(*read)  # every read command works under the user role


def test_a_signed_request_replayed_by_another_user_is_refused(users, shared):
    alice, mallory = users["alice"], users["mallory"]
    ns = shared
    job = alice.ok("submit", "--", "echo", "once").strip()
    wait(lambda: state_of(alice, job) == "succeeded", "alice's job", alice.logs)
    r = mallorys_redis(mallory)
    try:
        stream = r.xrange(keys.requests(ns))
    except redis.exceptions.NoPermissionError:  # the user role cannot even read others' requests;
        stream = admin(users["root"]).xrange(keys.requests(ns))  # say one leaked: she adds it again
    (_, fields), = [e for e in stream if text(e[1][b"user"]) == "dsp-alice"]
    for _ in range(2):
        r.xadd(keys.requests(ns), fields)
    r.publish(keys.events(ns), b"request")
    reply = keys.reply(ns, text(fields[b"id"]))
    answers = [msgpack.unpackb(r.blpop([reply], timeout=20)[1], raw=False)["error"] for _ in range(2)]
    assert all("already handled" in a for a in answers), answers
    print("replayed twice:", *answers, sep="\n  ")
    assert len(json.loads(alice.ok("queue", "--all", "--json"))) == 1


def test_a_job_holds_a_capability_for_itself_not_the_servers_password(users, shared, tmp_path):
    mallory = users["mallory"]
    job = mallory.ok("submit", "--", "sh", "-c", f"env; {sys.executable} -m dispatcher submit -- echo follow-up").strip()
    wait(lambda: state_of(mallory, job) == "succeeded", "mallory's job", mallory.logs)
    out = mallory.ok("logs", job)
    assert "redis://" not in out and "DISPATCH_TOKEN" not in out and "DISPATCH_JOB_CAP" in out
    follow = [line for line in out.splitlines() if line.strip().isdigit()][-1]
    wait(lambda: state_of(mallory, follow) == "succeeded", "the follow-up job", mallory.logs)
    assert json.loads(mallory.ok("show", follow, "--json"))["user"] == "dsp-mallory"


def test_the_node_enters_the_working_directory_as_the_user_and_keeps_logs_private(users, shared):
    mallory = users["mallory"]
    job = mallory.ok("submit", "--cwd", str(users["alice"].home), "--", "ls").strip()
    wait(lambda: state_of(mallory, job) == "failed", "the job in alice's home to fail", mallory.logs)
    reason = json.loads(mallory.ok("show", job, "--json"))["reason"]
    assert "cannot enter" in reason and "dsp-mallory" in reason, reason

    mine = mallory.ok("submit", "--", "echo", "private").strip()
    wait(lambda: state_of(mallory, mine) == "succeeded", "mallory's job", mallory.logs)
    root = users["root"]
    logs = [p for top in (root.home / "state", root.socket_dir) for p in top.rglob(f"logs/{mine}.log")]
    assert logs, "no node-side log file"
    st = logs[0].stat()
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == mallory.uid


def test_root_jobs_are_refused_on_a_shared_node(users, shared):
    root = users["root"]
    job = root.ok("submit", "--", "id", DISPATCH_HOME=str(root.home / "state")).strip()
    wait(lambda: state_of(users["alice"], job) == "failed", "root's job to be refused", root.logs)
    assert "root" in json.loads(users["alice"].ok("show", job, "--json"))["reason"]


def test_a_login_is_issued_for_the_caller_only(users, shared):
    alice, mallory = users["alice"], users["mallory"]
    assert alice.login_file()["user"] == "dsp-alice" and mallory.login_file()["user"] == "dsp-mallory"
    assert alice.login_file()["token"] != mallory.login_file()["token"]
    peek = mallory.sh(f"cat {alice.home}/.config/dispatch/login.json")
    assert peek.returncode != 0

"""Roles with least privilege (dispatcher/store/roles.py): what each Redis ACL user may and may not do,
on real servers started from the ACL file dispatch writes, Redis 7.0 and Valkey both."""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from dispatcher.store import control
from dispatcher.up.embedded import free_port, server_binary
from dispatcher.core.errors import ConfigError
from dispatcher.core.spec import build_spec
from dispatcher.store import keys, roles
from dispatcher.store.connect import connect
from dispatcher.store.jobs import append_log, cancel_job, read_job, read_log, read_queue, write_jobs
from dispatcher.store.nodes import read_nodes, remove_node, write_heartbeat
from dispatcher.store.scripts import Scripts
from dispatcher.store.snapshot import SpecCache, read_snapshot

NS = "rolestest"
PASSWORDS = {"admin": "admin pw", "leader": "l:pw/1", "agent": "a@pw", "user": "u pw%"}
BINARIES = {"valkey": server_binary(), "redis 7.0": shutil.which("redis-server")}


class AclServer:
    """A server binary started on an ACL file (`aclfile`), as `dispatch up` starts one."""

    def __init__(self, binary: str, tmp, acl: str):
        (tmp / "users.acl").write_text(acl)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(tmp),
                                      "--aclfile", str(tmp / "users.acl"), "--save", "", "--appendonly", "no"],
                                     stdout=(tmp / "server.log").open("wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                connect(self.login("admin")).close()
                return
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{binary} did not start on the ACL file: {(tmp / 'server.log').read_text()}")
                time.sleep(0.05)

    def login(self, role: str) -> str:
        if role == "admin":
            return f"redis://default:{PASSWORDS['admin'].replace(' ', '%20')}@127.0.0.1:{self.port}/0"
        return roles.role_url(self.url, NS, role, PASSWORDS[role])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module", params=[b for b in BINARIES if BINARIES[b]])
def server(request, tmp_path_factory):
    s = AclServer(BINARIES[request.param], tmp_path_factory.mktemp("acl"), roles.acl_file(NS, PASSWORDS))
    yield s
    s.stop()


@pytest.fixture
def lab(server):
    """A job running on node n1 (written by the admin login), and a client per login."""
    admin = connect(server.login("admin"))
    admin.flushall()
    logins = {r: connect(server.login(r)) for r in roles.ROLES}
    write_heartbeat(admin, NS, "n1", [], 8, 32.0, 1000, agent="vm:/var/lib/dispatch/n1")
    (job,) = write_jobs(admin, NS, [build_spec(command=["true"], user="alice", submit_ms=1000, gpus=0)])
    assert Scripts(admin, NS).commit_placement(job, "n1", [], 0, 2000) == 1
    append_log(admin, NS, job, b"hello\n")
    yield admin, logins, job
    for c in (admin, *logins.values()):
        c.close()


def refused(call) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    except redis.exceptions.ResponseError as e:  # a command refused inside MULTI or a script
        return any(s in str(e) for s in ACL_REFUSALS)
    return False


#: How Redis 7.0 and Valkey word a command refused inside a script or a MULTI.
ACL_REFUSALS = ("NOPERM", "no permissions", "can't run this command", "can't access at least one of the keys",
                "ACL failure")


def allowed(admin, role: str, *command) -> bool:
    """Whether the role's login may run `command` (ACL DRYRUN: nothing runs, so FLUSHALL is safe to ask)."""
    try:
        return admin.execute_command("ACL", "DRYRUN", roles.username(NS, role), *command) == b"OK"
    except redis.exceptions.ResponseError:  # e.g. an unknown command
        return False


def test_the_acl_file_holds_no_clear_password_and_every_role_logs_in(server):
    text = roles.acl_file(NS, PASSWORDS)
    assert not any(pw in text for pw in PASSWORDS.values())
    for role in roles.ROLES:
        c = connect(server.login(role))
        assert c.acl_whoami() == f"{NS}-{role}"
        c.close()
    with pytest.raises(Exception, match="authentication failed|WRONGPASS|NOAUTH"):
        connect(server.url).get("x")  # the default user has the admin's password


def test_a_role_url_keeps_host_port_db_and_query_and_quotes_the_password():
    url = roles.role_url("rediss://old:pw@db.lab:6380/2?ssl_ca_certs=/etc/ca.pem", "lab", "user", "p@ss:w/rd %")
    assert url == "rediss://lab-user:p%40ss%3Aw%2Frd%20%25@db.lab:6380/2?ssl_ca_certs=/etc/ca.pem"
    kw = redis.Redis.from_url(url).connection_pool.connection_kwargs
    assert (kw["username"], kw["password"], kw["host"], kw["port"], kw["db"]) == ("lab-user", "p@ss:w/rd %",
                                                                                  "db.lab", 6380, 2)
    assert roles.role_url("redis://127.0.0.1:6379/0", "dispatch", "agent", "x") == \
        "redis://dispatch-agent:x@127.0.0.1:6379/0"


def test_a_user_reads_what_the_views_read_and_sends_requests(lab):
    admin, logins, job = lab
    user = logins["user"]
    assert read_job(user, NS, job)["state"] == "assigned"
    assert [j["id"] for j in read_queue(user, NS)] == [job]
    assert [n.name for n in read_nodes(user, NS)[0]] == ["n1"]  # hget_each.lua, by EVAL_RO
    snapshot = read_snapshot(user, NS, 2000, 30, SpecCache()).snapshot  # read_jobs.lua, by EVAL_RO
    assert [r.spec.id for r in snapshot.running] == [job]
    assert [chunk for _, chunk in read_log(user, NS, job)] == [b"hello\n"]
    user.xadd(keys.requests(NS), {"id": "r1", "kind": "cancel"})
    user.publish(keys.events(NS), b"request")
    admin.rpush(keys.reply(NS, "r1"), b"answer")
    assert user.blpop([keys.reply(NS, "r1")], timeout=1) == (keys.reply(NS, "r1").encode(), b"answer")


def test_a_user_writes_no_record_index_log_or_control_stream(lab):
    admin, logins, job = lab
    user = logins["user"]
    spec = build_spec(command=["true"], user="mallory", submit_ms=1000, gpus=0)
    assert refused(lambda: write_jobs(user, NS, [spec]))  # a submit without identity
    assert refused(lambda: cancel_job(Scripts(user, NS), user, NS, job, 3000))
    assert refused(lambda: control.send(user, NS, "n1", {"type": "cancel", "job": job, "epoch": 1}))
    assert refused(lambda: user.xadd(keys.job_log(NS, job), {"d": b"forged"}, maxlen=0))
    assert refused(lambda: user.xtrim(keys.job_log(NS, job), maxlen=0))
    assert refused(lambda: user.hset(keys.job(NS, job), "state", "succeeded"))
    assert refused(lambda: user.zadd(keys.jobs_pending(NS), {job: 0}))
    assert refused(lambda: user.delete(keys.job(NS, job)))
    assert refused(lambda: user.hset(keys.auth(NS), "mode", "off"))
    assert refused(lambda: user.eval("return 1", 0))  # EVAL can write: only EVAL_RO
    assert refused(lambda: user.eval_ro("return redis.call('DEL', KEYS[1])", 1, keys.job(NS, job)))
    assert refused(lambda: user.script_load("return 1"))
    assert refused(lambda: user.keys("*")) and refused(lambda: user.scan())
    assert refused(lambda: user.xrange(keys.requests(NS)))  # others' signed requests stay unread
    assert refused(lambda: user.get("other:key"))
    assert admin.hget(keys.job(NS, job), "state") == b"assigned" and admin.xlen(keys.job_log(NS, job)) == 1


@pytest.mark.parametrize("role", roles.ROLES)
def test_no_role_may_run_an_admin_command(lab, role):
    admin, logins, _ = lab
    for command in (("CONFIG", "SET", "maxmemory", "1"), ("ACL", "SETUSER", "x", "on"), ("FLUSHALL",),
                    ("FLUSHDB",), ("SHUTDOWN",), ("DEBUG", "SLEEP", "0"), ("MODULE", "LIST"), ("KEYS", "*"),
                    ("SCRIPT", "FLUSH"), ("FUNCTION", "FLUSH"), ("FCALL", "f", "0"), ("CLIENT", "KILL", "ID", "1"),
                    ("CLIENT", "LIST"), ("MONITOR",)):
        assert not allowed(admin, role, *command), f"{role} may {' '.join(command)}"
    assert refused(lambda: logins[role].config_set("maxmemory", "1"))


def test_a_leader_works_the_namespace_and_rq_and_no_other_key(lab):
    admin, logins, job = lab
    leader = logins["leader"]
    assert Scripts(leader, NS).cancel(job, 3000, "by the scheduler") == 2  # active: its node is told
    leader.rpush("rq:queue:node.n1", b"x")
    leader.rename(keys.jobs_changed(NS), keys.quarantined(NS, keys.jobs_changed(NS), 1))
    assert leader.eval("return redis.call('GET', KEYS[1])", 1, keys.job_seq(NS)) == b"1"
    assert refused(lambda: leader.set("other:key", 1))
    assert refused(lambda: leader.eval("return redis.call('SET', 'other:key', 1)", 0))
    assert refused(lambda: leader.get("othernamespace:job:1"))


def test_an_agent_writes_what_agents_write_through_its_scripts(lab):
    admin, logins, job = lab
    agent = logins["agent"]
    scripts = Scripts(agent, NS)
    write_heartbeat(agent, NS, "n1", [], 8, 32.0, 3000)
    assert scripts.mark_running(job, 1, 3000, 4242) == 1
    append_log(agent, NS, job, b"more\n")
    control.ensure_group(agent, NS, "n1")
    control.read(agent, NS, "n1", pending=False, block_ms=10)
    assert read_job(agent, NS, job)["state"] == "running"
    assert scripts.finish(job, "n1", 1, "succeeded", 0, 4000) == 1
    agent.set(keys.job_exit(NS, job), "1 0 4000")
    agent.xadd(keys.requests(NS), {"id": "r2", "kind": "job-submit"})  # a job's follow-up, relayed
    assert remove_node(agent, NS, "n1", "vm:/var/lib/dispatch/n1")
    assert admin.hget(keys.job(NS, job), "state") == b"succeeded"


def test_an_agent_deletes_nothing_and_writes_no_index_policy_lease_or_identity_of_the_scheduler(lab):
    admin, logins, job = lab
    agent = logins["agent"]
    assert refused(lambda: agent.delete(keys.job(NS, job)))
    assert refused(lambda: agent.unlink(keys.job_log(NS, job)))
    assert refused(lambda: agent.xtrim(keys.job_log(NS, job), maxlen=0))
    assert refused(lambda: agent.zadd(keys.jobs_all(NS), {"99": 0}))
    assert refused(lambda: agent.set(keys.scheduler_leader(NS), "1 me"))
    assert refused(lambda: agent.hset(keys.auth(NS), "mode", "off"))  # identity stays on
    assert refused(lambda: agent.hset(keys.policy_applied(NS), "text", "x"))
    assert refused(lambda: agent.lpush(keys.decisions(NS), b"x"))
    assert refused(lambda: agent.set(keys.requests_done(NS), "0"))
    assert refused(lambda: agent.xrange(keys.requests(NS)))
    assert refused(lambda: agent.eval("return redis.call('DEL', KEYS[1])", 1, keys.job(NS, job)))
    assert refused(lambda: agent.rpush("other:key", 1))
    spec = build_spec(command=["true"], user="alice", submit_ms=1000, gpus=0)
    assert refused(lambda: write_jobs(agent, NS, [spec]))  # only through the leader, as a request
    assert admin.exists(keys.job(NS, job), keys.job_log(NS, job)) == 2


def test_what_an_agent_login_can_still_do_by_hand(lab):
    """docs/security.md, Roles: Redis runs a script's commands with its caller's rights, and an ACL
    cannot tell one job or node from another, so the agent's fenced writes are open to it by hand."""
    admin, logins, job = lab
    agent = logins["agent"]
    agent.hset(keys.job(NS, job), "state", "succeeded")  # any job's fields, bypassing the epoch
    agent.zrem(keys.jobs_active(NS), job)
    agent.xadd(keys.node_control(NS, "n2"), {"c": b"x"})  # another node's control stream
    agent.xadd(keys.job_log(NS, job), {"d": b"x"}, maxlen=1)  # a log, trimmed
    assert admin.hget(keys.job(NS, job), "state") == b"succeeded"


def test_an_admin_gives_the_roles_to_a_running_server_and_changes_their_passwords(client, ns, redis_url):
    first = {r: f"first-{r}" for r in roles.ROLES}
    roles.apply(client, ns, first)
    try:
        roles.apply(client, ns, {r: f"second-{r}" for r in roles.ROLES})
        user = connect(roles.role_url(redis_url, ns, "user", "second-user"))
        assert user.acl_whoami() == f"{ns}-user" and refused(lambda: user.hset(keys.job(ns, "1"), "state", "x"))
        user.close()
        with pytest.raises(Exception, match="authentication failed"):
            connect(roles.role_url(redis_url, ns, "user", "first-user"))
    finally:
        client.execute_command("ACL", "DELUSER", *[roles.username(ns, r) for r in roles.ROLES])


def test_a_missing_password_or_an_unknown_role_is_one_line_that_says_what_to_give():
    with pytest.raises(ConfigError, match="no password for agent, user: give one for each of admin, leader"):
        roles.acl_file(NS, {"admin": "a", "leader": "l"})
    with pytest.raises(ConfigError, match="no role 'admin': the roles are leader, agent, user"):
        roles.rules(NS, "admin")


@pytest.mark.skipif(not shutil.which("redis-cli"), reason="no redis-cli")
def test_what_print_roles_prints_makes_the_users_when_fed_to_redis_cli(server):
    out = io.StringIO()
    roles.print_roles("printed", out)
    assert out.getvalue().count("ACL SETUSER") == 3 and ">PASSWORD" in out.getvalue()
    admin = connect(server.login("admin"))
    try:
        subprocess.run(["redis-cli", "-u", server.login("admin")], input=out.getvalue().replace(">PASSWORD", ">pw"),
                       text=True, check=True, capture_output=True, timeout=30)
        agent = admin.acl_getuser(roles.username("printed", "agent"))
        assert len(agent["selectors"]) == len(admin.acl_getuser(roles.username(NS, "agent"))["selectors"])
        user = connect(roles.role_url(server.url, "printed", "user", "pw"))
        assert user.hget(keys.job("printed", "1"), "state") is None
        assert refused(lambda: user.hset(keys.job("printed", "1"), "state", "x"))
        user.close()
    finally:
        admin.execute_command("ACL", "DELUSER", *[roles.username("printed", r) for r in roles.ROLES])
        admin.close()


def test_the_roles_docs_security_md_shows_are_the_ones_dispatch_makes():
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    for role in roles.ROLES:
        assert f"user dispatch-{role} on #<sha256 of its password> {' '.join(roles.rules('dispatch', role))}" in text


def test_dispatch_auth_roles_prints_what_print_roles_prints():
    import sys

    out = io.StringIO()
    roles.print_roles("lab", out=out)
    p = subprocess.run([sys.executable, "-m", "dispatcher", "auth", "roles", "--namespace", "lab"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == out.getvalue()


def test_a_user_sends_keystrokes_and_an_agent_carries_the_terminal_and_neither_more(lab):
    """An interactive job's streams (store/tty.py): the user writes its keystrokes only (signed under identity,
    checked by the agent); the agent its output and the streams' lifetimes."""
    from dispatcher.store import tty

    admin, logins, job = lab
    user, agent = logins["user"], logins["agent"]
    tty.send_input(user, NS, job, "size", rows=40, cols=120)
    tty.send_input(user, NS, job, "in", b"ls\r")
    assert refused(lambda: user.xadd(keys.job_tty(NS, job, "out"), {"k": "out", "d": b"forged"}))
    assert refused(lambda: user.delete(keys.job_tty(NS, job, "in")))
    assert tty.last_size(agent, NS, job) == (40, 120) and len(tty.read_input(agent, NS, job, "0-0", 10)) == 2
    tty.started(agent, NS, job, 1)
    pipe = agent.pipeline(transaction=False)
    tty.add_output(pipe, NS, job, b"$ ")
    pipe.execute()
    tty.ended(agent, NS, job, 0, "succeeded", "")
    assert [e["k"] for _, e in tty.read_output(user, NS, job, "0-0", None)] == ["start", "out", "end"]
    assert not admin.exists(keys.job_tty(NS, job, "in")) and 0 < admin.ttl(keys.job_tty(NS, job, "out")) <= 600
    assert refused(lambda: agent.delete(keys.job_log(NS, job)))  # the terminal's streams alone

"""Least-privilege Redis logins for the three parts of a cluster, as Redis ACL users (Redis 7.0+ or
Valkey: ACL selectors and %R~/%W~ key permissions).

| user          | for                     | may                                                        |
|---------------|-------------------------|------------------------------------------------------------|
| <ns>-leader   | `dispatch scheduler`    | any command on the namespace's keys and RQ's, the scripts; |
|               |                         | no admin command, no key of another namespace              |
| <ns>-agent    | `dispatch worker`       | read the namespace; write only the keys an agent writes    |
|               |                         | (heartbeats, its control stream, logs, outcomes) and RQ's  |
| <ns>-user     | people: the CLI, the    | read what the read commands read; send signed requests     |
|               | dashboard, the API      | (XADD <ns>:requests) and wait for their answer; signed     |
|               |                         | keystrokes to an interactive job (<ns>:job:*:tty:in)       |

Redis checks each command a Lua script runs against the caller's rights, so a script cannot write
more than its caller could write by hand: the agent's fenced scripts (finish, mark_running, ...)
need HSET on job hashes and ZADD/ZREM on the pending and active indexes, and an agent login can
send those commands itself. What each login can still do is in docs/security.md ("Roles").

rules(ns, role) gives the ACL SETUSER tokens; acl_file() an ACL file for a server dispatch starts
(`aclfile`), with hashed passwords; apply() creates the users on a running server; role_url() the
URL each part connects with; print_roles() what an admin runs on an external server.
"""

from __future__ import annotations

import hashlib
import sys
from urllib.parse import quote, urlsplit, urlunsplit

from ..core.errors import ConfigError
from ..core.model import FINAL_STATES
from . import keys

ROLES = ("leader", "agent", "user")

#: RQ's own keys (rq:queue:<queue>, rq:job:<uuid>, rq:worker:<name>, registries...): RQ builds them,
#: and a job's key carries no queue name, so they cannot be fenced by namespace.
RQ_KEYS = "rq:*"
#: The pubsub channels of RQ's workers (rq:pubsub:<worker name>: commands sent to a worker).
RQ_CHANNELS = "rq:pubsub:*"

#: What every login needs to connect: redis-py's handshake (AUTH or HELLO, CLIENT SETNAME for RQ,
#: SELECT for a URL with a db), a ping, and ACL WHOAMI. Only commands Redis 7.0 knows: a server
#: refuses a whole ACL file that names one it does not (CLIENT SETINFO, which redis-py sends and
#: does without, is 7.2's).
_CONNECT = ("+auth", "+hello", "+ping", "+echo", "+select", "+quit", "+reset", "+client|setname",
            "+client|getname", "+client|id", "+client|info", "+acl|whoami")
#: Commands of @read that are not about a key the login may read: they list or count every key.
_KEY_LISTING = ("-keys", "-scan", "-randomkey", "-dbsize")
#: The scripts: EVALSHA of the registered ones (redis-py loads a missing one), EVAL for the calls
#: that send their source. Not SCRIPT FLUSH/KILL/DEBUG, not FUNCTION or FCALL.
_SCRIPTS = ("+evalsha", "+eval", "+evalsha_ro", "+eval_ro", "+script|load", "+script|exists")


def username(ns: str, role: str) -> str:
    _check_role(role)
    return f"{ns}-{role}"


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ConfigError(f"no role {role!r}: the roles are {', '.join(ROLES)}", key="role")


def read_patterns(ns: str) -> list[str]:
    """The keys the read commands read (queue, show, logs, wait, nodes, why, eta, decisions, top,
    history, tune, policy show/history/diff, the dashboard): every key of the namespace but the
    requests stream and its mark, the answers, the sequences and the fencing-token counter."""
    return [keys.job(ns, "*"),  # the job hashes and their log, attempts and exit report
            keys.jobs_all(ns), keys.jobs_pending(ns), keys.jobs_active(ns), keys.jobs_changed(ns),
            *_ended(ns), keys.history(ns, "*"), keys.user_history(ns, "*"),
            keys.node(ns, "*"),  # node hashes, their GPU holders and control streams
            keys.nodes_heartbeat(ns), keys.nodes_changed(ns), keys.nodes_drain(ns),
            keys.decisions(ns), keys.policy(ns), keys.policy_applied(ns), keys.policy_history(ns),
            keys.auth(ns), keys.scheduler_leader(ns), keys.scheduler_stats(ns), keys.scheduler_cluster(ns),
            keys.jobs_idle(ns), keys.jobs_ended_recent(ns), keys.samples(ns), keys.metrics(ns), keys.quarantine(ns)]


def _ended(ns: str) -> list[str]:
    """The ended-jobs indexes, one per final state (named one by one: no pattern that takes in more)."""
    return [keys.jobs_ended(ns, s) for s in FINAL_STATES]


def _selector(commands, patterns, perm: str = "") -> str:
    """One ACL selector: `commands` on keys matching `patterns` (perm "R", "W" or "" for both)."""
    return "(" + " ".join([*commands, *(f"%{perm}~{p}" if perm else f"~{p}" for p in patterns)]) + ")"


def _agent_writes(ns: str) -> list[str]:
    """The agent's writes, as selectors: each command only on the keys it is sent to, by the agent's
    code or by the scripts it runs (Redis checks each command of a script against its caller)."""
    job, alloc = keys.job(ns, "*"), keys.node_alloc(ns, "*")
    fenced = [job, alloc, keys.jobs_active(ns), keys.jobs_pending(ns), keys.jobs_changed(ns), keys.jobs_idle(ns),
              *_ended(ns),
              keys.scheduler_leader(ns), keys.history(ns, "*"), keys.user_history(ns, "*"), keys.node_control(ns, "*"),
              keys.metrics(ns)]
    return [
        # heartbeats (store/nodes.py), GPU holders and job fields (finish, shrink, mark_running,
        # checkpointed, idle_warning and its index; the peak GPU memory, workers/usage.py; the log file's
        # path and the claim of a --notify, job_record.claim_notify)
        _selector(("+hset", "+hsetnx", "+hdel", "+hincrby", "+hincrbyfloat"), [job, keys.node(ns, "*"),
                                                                               keys.jobs_idle(ns)]),
        # a start's latency, observed as mark_running.lua records it (store/counters.py)
        _selector(("+hincrby", "+hincrbyfloat"), [keys.metrics(ns)]),
        # a requeue (finish.lua: ZADD pending, ZREM active), an end (ZADD ended) and the heartbeat index
        _selector(("+zadd", "+zrem"), [keys.jobs_pending(ns), keys.jobs_active(ns), *_ended(ns),
                                       keys.nodes_heartbeat(ns)]),
        _selector(("+sadd",), [keys.jobs_changed(ns), keys.nodes_changed(ns)]),
        # ended attempts and the run histories (finish.lua)
        _selector(("+rpush", "+lpush", "+ltrim"), [keys.job_attempts(ns, "*"), keys.history(ns, "*"),
                                                   keys.user_history(ns, "*")]),
        # job output (lua/log_append.lua, which trims it) and malformed control commands set aside
        _selector(("+xadd",), [keys.job_log(ns, "*"), keys.quarantine(ns)], "W"),
        _selector(("+xdel",), [keys.job_log(ns, "*")], "W"),
        # an interactive job's terminal output and its streams' lifetimes (store/tty.py)
        _selector(("+xadd", "+persist", "+expire", "+del"), [keys.job_tty(ns, "*", "in"), keys.job_tty(ns, "*", "out")],
                  "W"),
        # the keeper's report of an exit its agent could not write (store/exits.py)
        _selector(("+set",), [keys.job_exit(ns, "*")], "W"),
        # its control stream, read as the consumer group "agents"; an idle job's requeue is sent on it
        # (workers/idle.py)
        _selector(("+xreadgroup", "+xack", "+xgroup|create", "+xgroup|createconsumer", "+xautoclaim", "+xclaim",
                   "+xpending", "+xadd"), [keys.node_control(ns, "*")]),
        # a job's follow-up submit, handed to the leader as a request (workers/jobchannel.py)
        _selector(("+xadd",), [keys.requests(ns)], "W"),
        _selector(("+blpop",), [keys.reply(ns, "*")]),
        # the scripts themselves: EVALSHA names its KEYS as read-write, whatever the script does
        _selector(_SCRIPTS, fenced),
    ]


def rules(ns: str, role: str) -> list[str]:
    """ACL SETUSER tokens for `role` in namespace `ns` (no on/off, no password)."""
    _check_role(role)
    events = keys.events(ns)
    if role == "leader":
        return ["resetkeys", f"~{keys.everything(ns)}", f"~{RQ_KEYS}", "resetchannels", f"&{events}",
                f"&{RQ_CHANNELS}", "+@all", "-@admin", "-@dangerous", "-@scripting", *_SCRIPTS, "+info",
                *_CONNECT]
    if role == "agent":
        return ["resetkeys", *(f"%R~{p}" for p in read_patterns(ns)), f"~{RQ_KEYS}", "resetchannels", f"&{events}",
                f"&{RQ_CHANNELS}", "+@all", "-@admin", "-@dangerous", "-@scripting", "+info", *_CONNECT,
                *_agent_writes(ns)]
    return ["resetkeys", *(f"%R~{p}" for p in read_patterns(ns)), f"~{keys.reply(ns, '*')}",
            "resetchannels", f"&{events}", "-@all", "+@read", *_KEY_LISTING, "+evalsha_ro", "+eval_ro",
            "+multi", "+exec", "+discard", "+blpop", "+publish", "+subscribe", "+unsubscribe", *_CONNECT,
            _selector(("+xadd",), [keys.requests(ns)], "W"),
            # keystrokes to an interactive job, each signed (store/tty.py; the agent drops what does not verify)
            _selector(("+xadd", "+expire"), [keys.job_tty(ns, "*", "in")], "W")]


def _hash(password: str) -> str:
    if not password:
        raise ConfigError("a role's password is empty: give each role a password", key="password")
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def _passwords_for(passwords: dict[str, str], needed) -> None:
    missing = [r for r in needed if r not in passwords]
    if missing:
        raise ConfigError(f"no password for {', '.join(missing)}: give one for each of admin, {', '.join(ROLES)}",
                          key="password")


def acl_file(ns: str, passwords: dict[str, str]) -> str:
    """An ACL file: the default user (full rights, passwords["admin"]) and one user per role, each
    with the sha256 of its password (the file holds no clear password)."""
    _passwords_for(passwords, ("admin", *ROLES))
    lines = [f"user default on {_hash(passwords['admin'])} ~* &* +@all"]
    lines += [" ".join(["user", username(ns, r), "on", _hash(passwords[r]), *rules(ns, r)]) for r in ROLES]
    return "\n".join(lines) + "\n"


def role_url(url: str, ns: str, role: str, password: str) -> str:
    """`url` with the user <ns>-<role> and `password` (host, port, db and query kept)."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    auth = f"{quote(username(ns, role), safe='')}:{quote(password, safe='')}@"
    return urlunsplit((parts.scheme, auth + hosts, parts.path, parts.query, parts.fragment))


def setuser_commands(ns: str, passwords: dict[str, str] | None = None) -> list[list[str]]:
    """The ACL SETUSER command of each role (its password hashed; '>PASSWORD' where none is given)."""
    return [["ACL", "SETUSER", username(ns, r), "reset", "on",
             _hash(passwords[r]) if passwords else ">PASSWORD", *rules(ns, r)] for r in ROLES]


def apply(client, ns: str, passwords: dict[str, str]) -> None:
    """Create (or reset) each role's user on a running server, through a login allowed ACL SETUSER."""
    _passwords_for(passwords, ROLES)
    for command in setuser_commands(ns, passwords):
        client.execute_command(*command)


def print_roles(ns: str, out=None) -> None:
    """What an admin runs on an external server: each role's ACL SETUSER, for redis-cli (one command
    a line; put a password in place of PASSWORD, or call dispatcher.store.roles.apply)."""
    out = out or sys.stdout
    for role, command in zip(ROLES, setuser_commands(ns)):
        print(f"# {role}: connect as {username(ns, role)}", file=out)
        print(" ".join(f'"{t}"' if " " in t else t for t in command), file=out)

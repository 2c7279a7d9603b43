"""`dispatch top` and the long-running parts: scheduler, worker, dashboard, up (registered lazily in
cli.py; the policy group is in cli/policy.py, the auth group in cli/login.py)."""

from __future__ import annotations

import os
import re
import signal
import sys

import click

from ..core import errors
from .flags import alerts_option, no_alerts_flag
from . import _setup_logging, common
from ..core.errors import InvalidRequestError, masked_url

_NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: The dashboard's default port (`dispatch dashboard`, `dispatch up`).
DASHBOARD_PORT = 8090


def _board(ctx, alerts):
    from ..views.board import Board
    from ..config import Timing

    no_alerts_flag(alerts)
    return Board(ctx.client, ctx.ns, timing=Timing.from_env())


@click.command()
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and logs; as when piped).")
@click.option("--interval", default="2s", show_default=True, metavar="DURATION",
              help="Time between frames (0.5, 2s, 1m; at least 0.2s).")
@alerts_option
@common
def top(ctx, once, interval, alerts):
    """A live terminal view, as nvtop and htop: GPUs (utilization, memory, job, user), jobs, users,
    alerts. Keys: Tab pane, s sort, / filter, c class, arrows scroll, ? help, q quit. Piped or
    redirected, it prints one frame (plain text) and exits."""
    from ..core.units import parse_duration
    from ..views.top import run

    interval_s = parse_duration(interval, flag="--interval")
    if interval_s < 0.2:
        raise InvalidRequestError(f"--interval: at least 0.2s, got {interval!r}", field="--interval")
    run(_board(ctx, alerts), interval_s=interval_s, once=once)


# -- long-running parts ---------------------------------------------------------------------
def _stop_on_signals(event) -> None:
    def handler(signum, frame):
        event.set()
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _when_server_answers(ctx, stop, start):
    """`start()` once the server takes it. A long-running process (scheduler, node agent) waits out
    a server that is away at its start (restarting, loading, a full disk) rather than exit; a wrong
    URL or password still stops it in one line."""
    import logging

    import redis

    from ..core.errors import ConnectionError as DispatchConnectionError
    from ..store.connect import redis_reason, transient

    wait = 0.5
    while True:
        try:
            ctx.client.ping()
            return start()
        except (DispatchConnectionError, redis.exceptions.RedisError) as e:
            if not (e.transient if isinstance(e, DispatchConnectionError) else transient(e)):
                raise
            ctx._client = None
            logging.getLogger("dispatch").warning("waiting for the server at %s (%s); retrying in %.1fs",
                                                  masked_url(ctx.url), redis_reason(e), wait)
            if stop.wait(wait):
                raise SystemExit(0)
            wait = min(wait * 2, 10.0)


def _policy_option(fn):
    return click.option("--policy", "policy_path", envvar="DISPATCH_POLICY", default=None,
                        type=click.Path(dir_okay=False),
                        help="Policy file (TOML); reloaded when it changes. Default: built-in weights.")(fn)


def _secret_option(fn):
    fn = click.option("--admins", default="", envvar="DISPATCH_ADMINS", metavar="USER,USER",
                      help="With --secret-file: users who may cancel or preempt anyone's jobs.")(fn)
    return click.option("--secret-file", default=None, envvar="DISPATCH_SECRET_FILE", type=click.Path(dir_okay=False),
                        help="Turn identity on: the lab secret (chmod 600); see docs/security.md.")(fn)


def _verifier(secret_file, admins):
    if not secret_file:
        return None
    from ..auth.identity import Verifier, load_secret

    return Verifier(load_secret(secret_file), [a for a in admins.split(",") if a])


@click.command()
@_policy_option
@_secret_option
@common
def scheduler(ctx, policy_path, secret_file, admins):
    """Run the scoring scheduler (one per cluster)."""
    import threading

    from ..config import Timing
    from ..scheduler.policy_source import PolicySource
    from ..scheduler.loop import Scheduler

    _setup_logging(ctx.debug)
    source = PolicySource(policy_path)
    stop = threading.Event()
    _stop_on_signals(stop)
    timing, verifier = Timing.from_env(), _verifier(secret_file, admins)
    sched = _when_server_answers(ctx, stop, lambda: _identity_matches(ctx, verifier, "scheduler") or Scheduler(
        ctx.client, ctx.ns, policy=source, timing=timing, verifier=verifier))
    click.echo(f"dispatch scheduler on {masked_url(ctx.url)} (namespace {ctx.ns}); leads while it holds the lease, "
               "else stands by", err=True)
    sched.run(stop)


def _identity_matches(ctx, verifier, what: str) -> None:
    """A scheduler or agent without the lab secret on a namespace that has identity on would place
    launches nobody seals, or start jobs nobody checked: it refuses in one line."""
    from ..store import keys, requests

    if verifier is None and requests.identity_on(ctx.client, ctx.ns):
        raise errors.ConfigError(f"namespace {ctx.ns} has identity on ({keys.auth(ctx.ns)}): start this {what} with "
                                 "--secret-file (beside `dispatch up`: `secret` in its state directory; to turn "
                                 "identity off, delete that key)", key="--secret-file")
    if verifier is not None and not verifier.admins:  # no --admins: the cluster's (a standby beside `up` led
        verifier.admins = requests.published_admins(ctx.client, ctx.ns)  # with none: up's admins could drain no node)


def _node_options(fn):
    fn = click.option("--fake-gpus", default=None, metavar="SPEC",
                      help="Pretend GPUs instead of NVML, e.g. 2xA100-40GB,2xV100-16GB or 4xT4:16.")(fn)
    fn = click.option("--cpus", default=None, type=click.IntRange(1, 100000), help="CPU cores to offer.")(fn)
    fn = click.option("--mem", "mem_gb", default=None, type=click.FloatRange(0), help="Memory to offer, GB.")(fn)
    fn = click.option("--work-dir", default=None, type=click.Path(file_okay=False),
                      help="Where job logs and checkpoints live on this node.")(fn)
    fn = click.option("--kill-zombies", is_flag=True,
                      help="Kill processes that hold a GPU but belong to no job (default: only stop handing "
                           "that GPU out, and report it).")(fn)
    fn = click.option("--run-as-user", is_flag=True,
                      help="Run each job as its submitting Unix user (the agent must run as root; needs "
                           "--secret-file).")(fn)
    fn = click.option("--address", default=None, metavar="IP",
                      help="Where this node's jobs are reached by other nodes (a multi-node job's ranks meet "
                           "rank 0 there; default: this host's address on its route to Redis).")(fn)
    fn = click.option("--checkpoint-root", default=None, type=click.Path(file_okay=False),
                      help="Where jobs' DISPATCH_CHECKPOINT_DIRs are made (default: in --work-dir); shared "
                           "storage on every node, for multi-node jobs that resume.")(fn)
    fn = click.option("--allow-root-jobs", is_flag=True, envvar="DISPATCH_ALLOW_ROOT_JOBS",
                      help="Let an agent that runs as root run jobs as root: every job without --run-as-user, "
                           "root's jobs with it (env DISPATCH_ALLOW_ROOT_JOBS=1).")(fn)
    return fn


#: _check_node's `identity` when the caller does not say whether identity is on (then it checks that itself).
_UNSAID = object()


def _check_node(node: str, opts: dict, identity=_UNSAID) -> None:
    """Refuse, in one line, a node agent that would run a job as someone it is not (docs/security.md)."""
    if not _NODE_NAME.match(node):
        raise InvalidRequestError(f"--node: {node!r} may hold only letters, digits and _.- (at most 64)",
                                  field="--node")
    if opts["run_as_user"] and os.geteuid() != 0:
        raise InvalidRequestError("--run-as-user: the node agent must run as root to start jobs as their users",
                                  field="--run-as-user")
    if opts["run_as_user"] and identity is not _UNSAID and not identity:
        raise InvalidRequestError("--run-as-user needs identity (--secret-file): without it any user can submit "
                                  "as another", field="--run-as-user")
    if os.geteuid() == 0 and not opts["run_as_user"] and not opts["allow_root_jobs"]:
        raise InvalidRequestError("this node agent runs as root and would run every job as root: give "
                                  "--run-as-user (each job as its user) or --allow-root-jobs "
                                  "(DISPATCH_ALLOW_ROOT_JOBS=1) to run them as root anyway", field="--allow-root-jobs")
    if opts["fake_gpus"] is not None:  # ('' too: an empty value is refused, not read as no flag)
        from workers.gpu import parse_fake_gpus

        parse_fake_gpus(opts["fake_gpus"])  # a bad spec is refused here, not by a child of `up`


def _run_agent(ctx, node, opts: dict, verifier=None):
    """`opts`: the values of _node_options."""
    import logging
    import threading

    from ..config import Timing, state_dir
    from workers.agent import NodeAgent
    from workers.gpu import open_probe
    from workers.jobchannel import socket_path  # (its jobs' mark: another agent's fake GPUs are not ours)

    _check_node(node, opts, identity=verifier is not None)
    timing = Timing.from_env().check()
    work_dir = opts["work_dir"] or state_dir() / "node" / node
    probe = open_probe(opts["fake_gpus"], node, ctx.ns, str(socket_path(work_dir)))
    if os.geteuid() == 0 and not opts["run_as_user"]:  # (once nothing can refuse to start any more)
        logging.getLogger("dispatch.agent").warning(
            "node %s: --allow-root-jobs: every job on this node runs as root (--run-as-user runs each as its user)",
            node)
    stop = threading.Event()
    _stop_on_signals(stop)
    agent = _when_server_answers(ctx, stop, lambda: _identity_matches(ctx, verifier, "node agent") or NodeAgent(
        ctx.client, ctx.ns, node, probe, cpus=opts["cpus"], mem_gb=opts["mem_gb"], work_dir=work_dir, timing=timing,
        url=ctx.url, run_as_user=opts["run_as_user"], verifier=verifier, kill_zombies=opts["kill_zombies"], stop=stop,
        allow_root_jobs=opts["allow_root_jobs"], address=opts["address"], checkpoints=opts["checkpoint_root"]))
    agent.run()


@click.command()
@click.option("--node", default=None, help="Node name (default: the host name).")
@_node_options
@_secret_option
@common
def worker(ctx, node, secret_file, admins, **node_opts):
    """Run a node agent on this GPU host: heartbeat its GPUs and run the jobs placed on it."""
    import socket

    _setup_logging(ctx.debug)
    _run_agent(ctx, socket.gethostname().split(".")[0] if node is None else node, node_opts,
               _verifier(secret_file, admins))  # (--node '' is refused, as any empty flag: not the host name)


def _dashboard_options(fn):
    fn = click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
                      help="Also answer dashboard requests whose Host header is NAME (a reverse proxy's name; "
                           "repeatable). Others than localhost, the address it listens on, IP addresses and, on "
                           "0.0.0.0, this machine's names are refused.")(fn)
    fn = click.option("--allow-cancel", is_flag=True,
                      help="Let the page cancel jobs and requeue ended ones (with identity on: the owner's or an "
                           "admin's token).")(fn)
    return alerts_option(fn)


def _kept_key() -> str:
    """`up`'s dashboard access key: the state dir's dashboard.key (0600), made by the first `up` and kept
    by every later one (a new key at each start broke a Prometheus scrape with 401s after each restart;
    the file is its credentials_file as it is)."""
    import secrets

    from ..config import state_dir, write_private

    path = state_dir() / "dashboard.key"
    try:
        key = path.read_text().strip()
    except OSError:
        key = ""
    if len(key) < 16 or not key.replace("-", "").replace("_", "").isalnum():  # (none yet, or not one of ours)
        key = secrets.token_urlsafe(24)
        write_private(path, key + "\n")
    return key


def _serve_dashboard(ctx, host, port, allow_cancel, alerts, access_key=None, record_url=False, allowed_hosts=()):
    """The dashboard's server, listening (not yet serving). `record_url`: its URL (with the key) is
    also kept in the state dir's dashboard.url (0600), for `up`'s owner."""
    from urllib.parse import quote

    from ..views.dashboard import make_server

    server = make_server(_board(ctx, alerts), host, port, allow_cancel=allow_cancel, access_key=access_key,
                         allowed_hosts=allowed_hosts)
    url = f"http://{host}:{server.port}/" + (f"?key={quote(access_key, safe='')}" if access_key else "")
    if record_url:
        from ..config import state_dir, write_private

        write_private(state_dir() / "dashboard.url", url + "\n")
    if allow_cancel:  # before the line that says it listens, which whoever waits for it reads as ready
        from ..store.requests import identity_on

        if not identity_on(ctx.client, ctx.ns):
            click.echo("dispatch: warning: --allow-cancel with identity off: anyone who can reach this page "
                       "may cancel any job, or requeue an ended one (recorded as 'anonymous from ADDR'); a "
                       "dispatch up with identity asks for a user and token instead", err=True)
    click.echo(f"dispatch: dashboard on {url} (metrics at /metrics)" + ("" if allow_cancel else ", read-only"),
               err=True)
    return server


@click.command()
@click.option("--host", default="127.0.0.1", envvar="DISPATCH_DASHBOARD_HOST", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", default=DASHBOARD_PORT, type=click.IntRange(0, 65535), envvar="DISPATCH_DASHBOARD_PORT",
              show_default=True, help="Port (0: any free one).")
@click.option("--access-key-file", default=None, envvar="DISPATCH_DASHBOARD_KEY_FILE", type=click.Path(dir_okay=False),
              help="Show the page only to who gives the key in this file (chmod 600), as `dispatch up` does: "
                   "?key=KEY once, or Authorization: Bearer KEY.")
@_dashboard_options
@common
def dashboard(ctx, host, port, access_key_file, allowed_hosts, allow_cancel, alerts):
    """The web dashboard and Prometheus /metrics: queue, GPUs, decisions, usage, alerts; live."""
    key = None
    if access_key_file:
        from ..auth.identity import load_secret

        key = load_secret(access_key_file, flag="--access-key-file").decode()
    server = _serve_dashboard(ctx, host, port, allow_cancel, alerts, access_key=key, allowed_hosts=allowed_hosts)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where it came ignored (`dashboard &`)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@click.command()
@click.option("--node", default=None, help="Name of the local node (default: the host name).")
@click.option("--port", default=None, type=click.IntRange(1, 65535), help="Port of the embedded server.")
@click.option("--fsync", default="everysec", type=click.Choice(["everysec", "always"]),
              help="Embedded server: append-only file synced every second (default) or on every write "
                   "(docs/guarantees.md).")
@click.option("--dashboard-port", default=DASHBOARD_PORT, type=click.IntRange(0, 65535), show_default=True,
              envvar="DISPATCH_DASHBOARD_PORT", help="Port of the dashboard, on 127.0.0.1 (0: any free one).")
@click.option("--no-dashboard", is_flag=True, help="Do not start the dashboard.")
@click.option("--shared", is_flag=True, help="Let this host's other users in: each logs in with `dispatch login` "
              "and submits as themself (as root, their jobs run as them); embedded server only.")
@click.option("--socket", "socket_path", default=None, type=click.Path(dir_okay=False),
              help="With --shared: the login socket (default /tmp/dispatch-<you>/dispatch.sock).")
@_dashboard_options
@_node_options
@_policy_option
@_secret_option
@common
def up(ctx, node, port, fsync, dashboard_port, no_dashboard, shared, socket_path, allowed_hosts, allow_cancel, alerts,
       policy_path, secret_file, admins, **node_opts):
    """All in one: embedded Redis (unless --redis is given), the scheduler and a local node agent, restarted
    if they die. One per state directory ($DISPATCH_HOME): a second one refuses. Locked: only you can reach
    it, unless --shared (docs/security.md)."""
    import socket

    from . import DEFAULT_NAMESPACE
    from ..config import Timing, state_dir
    from ..scheduler.policy_source import PolicySource
    from ..up.lock import UpLock
    from ..up.supervisor import Up
    from ..up.secure import agent_options, login_socket

    _setup_logging(ctx.debug)
    UpLock(state_dir()).refuse_if_held()  # whatever this one's flags, and before NVML: the running one is named
    ctx._ns_flag = ns = ctx._ns_flag or DEFAULT_NAMESPACE  # never a login's: this is a server of its own
    sock = login_socket(shared, socket_path, ctx._url_flag)
    PolicySource(policy_path)  # a bad policy file stops `up` before anything starts
    no_alerts_flag(alerts)  # and so does the old --alerts (the thresholds are the policy file's)
    Timing.from_env().check()  # and clocks that cannot fence in time
    node = socket.gethostname().split(".")[0] if node is None else node
    agent_options(node_opts, embedded=ctx._url_flag is None, socket_path=sock, node=node)
    _check_node(node, node_opts, identity=ctx._url_flag is None or bool(secret_file))
    if not node_opts["fake_gpus"]:  # fail before starting anything if this host has no GPUs to offer
        from workers.gpu import NvmlProbe

        NvmlProbe().close()
    flags = ["--namespace", ns] + (["--debug"] if ctx.debug else [])
    scheduler_args = flags + (["--policy", os.path.abspath(policy_path)] if policy_path else [])
    agent_args = flags + ["--node", node] + _node_flags(node_opts)

    import threading

    def start_dashboard(url):
        ctx._url_flag = url
        try:
            # the host's other users reach 127.0.0.1 too: the page shows itself to the key's holders only
            web = _serve_dashboard(ctx, "127.0.0.1", dashboard_port, allow_cancel, alerts,
                                   access_key=_kept_key(), record_url=True, allowed_hosts=allowed_hosts)
        except errors.ConfigError as e:  # a taken port costs the page, not the cluster
            click.echo(f"dispatch: warning: no dashboard: {str(e).replace('--port', '--dashboard-port', 1)} "
                       "(--dashboard-port 0 takes any free one)", err=True)
            return None
        threading.Thread(target=web.serve_forever, name="dashboard", daemon=True).start()
        return web

    Up(ns=ns, url=ctx._url_flag, port=port, fsync=fsync, scheduler_args=scheduler_args, agent_args=agent_args,
       start_dashboard=None if no_dashboard else start_dashboard, socket_path=sock,
       secret_file=os.path.abspath(secret_file) if secret_file else None,
       admins=[a for a in admins.split(",") if a]).run()


def _node_flags(opts: dict) -> list[str]:
    """The values of _node_options as `dispatch worker` flags again."""
    out = []
    for flag, key in (("--fake-gpus", "fake_gpus"), ("--cpus", "cpus"), ("--mem", "mem_gb"), ("--address", "address")):
        if opts[key] is not None:
            out += [flag, str(opts[key])]
    for flag, key in (("--work-dir", "work_dir"), ("--checkpoint-root", "checkpoint_root")):
        if opts[key]:
            out += [flag, os.path.abspath(opts[key])]
    return out + [flag for flag, key in (("--kill-zombies", "kill_zombies"), ("--run-as-user", "run_as_user"),
                                         ("--allow-root-jobs", "allow_root_jobs")) if opts.get(key)]


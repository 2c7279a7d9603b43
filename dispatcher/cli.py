"""The `dispatch` command. Subcommands parse, call one library function, and format.

This is the only place errors become messages: a DispatcherError prints one line
and exits with its code; tracebacks appear only with --debug. Imports of redis,
rq and pynvml stay inside the commands that need them, so `dispatch submit` is quick.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import sys
import time

import click

from . import errors
from .errors import DispatcherError, InvalidRequestError
from .identity import current_user

_NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: The dashboard's default port (`dispatch dashboard`, `dispatch up`).
DASHBOARD_PORT = 8090


class Ctx:
    """Lazily connecting context shared by the subcommands."""

    def __init__(self, url: str | None, ns: str, debug: bool):
        self._url_flag, self.ns, self.debug = url, ns, debug
        self._client = None

    @property
    def url(self) -> str:
        from .config import resolve_url

        return resolve_url(self._url_flag)

    @property
    def client(self):
        if self._client is None:
            from .store.connect import connect

            self._client = connect(self.url)
        return self._client

    @property
    def scripts(self):
        from .store.scripts import Scripts

        return Scripts(self.client, self.ns)


def common(fn):
    """--redis, --namespace and --debug on every command."""
    @click.option("--redis", "redis_url", envvar="DISPATCH_REDIS_URL", metavar="URL",
                  help="Redis URL (env DISPATCH_REDIS_URL; default: the server `dispatch up` started).")
    @click.option("--namespace", "ns", envvar="DISPATCH_NAMESPACE", default="dispatch", show_default=True,
                  help="Key prefix, to run several clusters on one Redis.")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    @functools.wraps(fn)
    def wrapper(redis_url, ns, debug, **kwargs):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", ns):
            raise click.BadParameter("letters, digits and _.- only", param_hint="--namespace")
        ctx = Ctx(redis_url, ns, debug)
        click.get_current_context().meta["debug"] = debug
        return fn(ctx, **kwargs)
    return wrapper


def json_flag(fn):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def now_ms() -> int:
    return int(time.time() * 1000)


def _fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*map(str, r)).rstrip() for r in [header] + rows)


def _setup_logging(debug: bool) -> None:
    import logging

    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dispatch-gpu", prog_name="dispatch")
def cli():
    """dispatch: whose turn is it on the GPUs? Submit jobs; a scoring scheduler places them on GPU nodes."""


# -- submitting and looking ------------------------------------------------------------------
@cli.command(context_settings={"ignore_unknown_options": False})
@click.option("--name", default="", help="A name for the job.")
@click.option("--user", default=None, help="Owner (default: $USER).")
@click.option("--team", default="", help="Team, for quotas.")
@click.option("--gpus", default="0", metavar="N|MIN-MAX",
              help="Number of GPUs, all on one node (0: CPU only); a range (1-8) lets the scheduler choose.")
@click.option("--scaling", default=None, metavar="MODEL",
              help="With --gpus MIN-MAX: linear, amdahl:P or a table like 1:10h,2:5.5h,4:3h,8:1.5h (--est is "
                   "the run time on MAX GPUs).")
@click.option("--gpu-type", default=None, metavar="T", help="Acceptable GPU families, e.g. A100 or 'A100|H100'.")
@click.option("--gpu-mem", default="0", metavar="GB", help="Minimum memory of each GPU, in GB.")
@click.option("--cpus", default="1", metavar="N", help="CPU cores.")
@click.option("--mem", default="0", metavar="GB", help="Host memory, in GB.")
@click.option("--priority", default="normal", metavar="P", help="critical, high, normal or low.")
@click.option("--est", default=None, metavar="DURATION", help="Estimated run time: 90s, 15m, 2h.")
@click.option("--checkpointable", is_flag=True, help="The job can save a checkpoint and resume.")
@click.option("--share", is_flag=True, help="May share its GPUs with other --share jobs, within --gpu-mem each.")
@click.option("--min-gpus", default=None, metavar="N", help="Elastic: may be shrunk to N GPUs (needs --checkpointable).")
@click.option("--preemptible", is_flag=True, help="May be killed (forced preemption) by any higher class.")
@click.option("--checkpoint-signal", default="TERM", metavar="SIG", help="Signal that asks for a checkpoint.")
@click.option("--grace", default="30s", metavar="DURATION", help="Time between SIGTERM and SIGKILL.")
@click.option("--retries", default="3", metavar="N",
              help="Reruns after an attempt is lost with its node (agent or host died); then the job fails.")
@click.option("--after", default=None, metavar="JOB[,JOB]",
              help="Start once these jobs all succeeded; if one fails or is cancelled, this one fails too.")
@click.option("--after-any", "after_any", default=None, metavar="JOB[,JOB]",
              help="Start once these jobs all ended, however they ended.")
@click.option("--env", "env", multiple=True, metavar="K=V", help="Environment variable for the job (repeatable).")
@click.option("--cwd", default=None, help="Working directory on the node (default: the current one).")
@click.option("--from", "from_file", default=None, type=click.File("r"), metavar="FILE.jsonl",
              help="Submit many jobs, one JSON object per line ({\"command\": [...], \"gpus\": 2, ...}; "
                   "the flags give defaults); all or nothing. '-' reads standard input.")
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
@common
def submit(ctx, from_file, command, **flags):
    """Submit a job: dispatch submit --gpus 2 --gpu-type A100 -- python train.py. Prints the job id."""
    from .spec import gc_paused, spec_from_request
    from .store.requests import submit_specs

    given = click.get_current_context().get_parameter_source  # (flags left at their defaults are the spec's)
    defaults = {k: v for k, v in flags.items() if given(k) is not click.core.ParameterSource.DEFAULT}
    now, here, me = now_ms(), os.getcwd(), current_user()
    if from_file is not None and command:
        raise InvalidRequestError("give either a command or --from FILE, not both", field="--from")
    with gc_paused():
        if from_file is None:
            specs = [spec_from_request({**defaults, "command": list(command)}, user=me, submit_ms=now, cwd=here)]
        else:
            specs = []
            for n, line in enumerate(from_file, 1):
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                    specs.append(spec_from_request({**defaults, **request} if isinstance(request, dict) else request,
                                                   user=me, submit_ms=now, cwd=here))
                except json.JSONDecodeError as e:
                    raise InvalidRequestError(f"{from_file.name} line {n}: not JSON ({e.msg})",
                                              field="--from") from None
                except InvalidRequestError as e:
                    raise InvalidRequestError(f"{from_file.name} line {n}: {e}", field="--from") from None
        ids = submit_specs(ctx.client, ctx.ns, specs, me)
    click.echo("\n".join(ids))


@cli.command()
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs (the latest 1000).")
@json_flag
@common
def queue(ctx, show_all, as_json):
    """Pending and running jobs, oldest first."""
    from .store import keys
    from .store.connect import text
    from .store.jobs import read_queue

    jobs = read_queue(ctx.client, ctx.ns, include_final=show_all)
    if as_json:
        click.echo(json.dumps(jobs, indent=1))
        return
    now = time.time()
    rows = []
    rest = text(ctx.client.hget(keys.scheduler_stats(ctx.ns), "rest_reason"))  # jobs the last cycle did not reach
    for j in jobs:
        waited = ((j["started_at"] or j["assigned_at"] or j["finished_at"] or now) - j["submitted_at"]
                  if j["submitted_at"] else None)
        gpus = f"{j['gpus_requested']}" + (f"x{'|'.join(j['gpu_types'])}" if j["gpu_types"] else "")
        where = f"{j['node']}:{','.join(map(str, j['gpus']))}" if j["node"] else "-"
        reason = j["reason"] if j["state"] in ("pending", "failed", "cancelled") else ""
        reason = reason or (rest if j["state"] == "pending" else "")
        rows.append([j["id"], j["name"] or "-", j["user"], j["priority"], j["state"], gpus, where,
                     _fmt_age(waited), reason[:90]])
    click.echo(_table(rows, ["ID", "NAME", "USER", "PRIORITY", "STATE", "GPUS", "NODE", "WAIT", "REASON"]))


@cli.command()
@click.argument("job_id")
@json_flag
@common
def show(ctx, job_id, as_json):
    """One job in full."""
    from .store.jobs import read_job

    job = read_job(ctx.client, ctx.ns, job_id)
    if as_json:
        click.echo(json.dumps(job, indent=1))
        return
    def at(v):
        return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(v))} ({v:.3f})" if v else "-"

    attempts = job.pop("attempts", [])
    from .predict import describe

    job["prediction"] = describe(job["prediction"], job.pop("prediction_error"))
    for k, v in job.items():
        if k.endswith("_at") and v:
            v = at(v)
        click.echo(f"{k:>16}: {v if v not in (None, '', []) else '-'}")
    for a in attempts:
        click.echo(f"{'attempt ' + str(a['attempt']):>16}: {a['outcome']} on {a['node'] or '-'} GPUs {a['gpus']}, "
                   f"{at(a['started_at'])} to {at(a['ended_at'])}" + (f": {a['reason']}" if a["reason"] else ""))


@cli.command()
@click.argument("job_ids", nargs=-1, required=True)
@common
def cancel(ctx, job_ids):
    """Cancel jobs: pending ones at once, running ones through their node (SIGTERM, grace, SIGKILL)."""
    from .store.jobs import cancel_job
    from .store.requests import act_signed, identity_on

    signed = identity_on(ctx.client, ctx.ns)
    for job_id in job_ids:
        if signed:
            outcome = act_signed(ctx.client, ctx.ns, "cancel", current_user(), job_id)
        else:
            outcome = cancel_job(ctx.scripts, ctx.client, ctx.ns, job_id, now_ms())
        msg = {"cancelled": "cancelled", "requested": "cancel sent to its node"}.get(outcome, f"already {outcome}")
        click.echo(f"{job_id}: {msg}")


@cli.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Kill it even if it cannot checkpoint (its work since start is lost).")
@common
def preempt(ctx, job_id, force):
    """Preempt a running job: checkpoint signal, grace, SIGKILL; it goes back to the queue."""
    from .store.jobs import preempt_job
    from .store.requests import act_signed, identity_on

    if identity_on(ctx.client, ctx.ns):
        mode = act_signed(ctx.client, ctx.ns, "preempt", current_user(), job_id, force=force)
    else:
        mode = preempt_job(ctx.scripts, ctx.client, ctx.ns, job_id, now_ms(), force=force, by=f"operator {current_user()}")
    click.echo(f"{job_id}: {mode} preemption sent to its node")


@cli.command()
@common
def checkpointed(ctx):
    """From inside a job: report that it just saved a checkpoint (less work lost if preempted)."""
    job_id, epoch = os.environ.get("DISPATCH_JOB_ID"), os.environ.get("DISPATCH_EPOCH")
    if not job_id or not epoch:
        raise InvalidRequestError("run this inside a dispatch job: DISPATCH_JOB_ID and DISPATCH_EPOCH are not set",
                                  field="DISPATCH_JOB_ID")
    if ctx.scripts.checkpointed(job_id, epoch, now_ms()) != 1:
        raise errors.InvalidStateError(job_id, "not running at this epoch", "record a checkpoint for")


@cli.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@common
def logs(ctx, job_id, follow):
    """A job's output, from any host."""
    from .store.jobs import read_job, read_log

    read_job(ctx.client, ctx.ns, job_id)  # JobNotFound for a bad id
    out = sys.stdout.buffer
    last = "-"
    for last, chunk in read_log(ctx.client, ctx.ns, job_id):
        out.write(chunk)
    out.flush()
    if not follow:
        return
    from .store.jobs import is_final

    while True:
        got = read_log(ctx.client, ctx.ns, job_id, last, block_ms=500)
        for last, chunk in got:
            out.write(chunk)
        out.flush()
        if not got and is_final(read_job(ctx.client, ctx.ns, job_id)["state"]):
            for last, chunk in read_log(ctx.client, ctx.ns, job_id, last):
                out.write(chunk)
            out.flush()
            return


@cli.command()
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--timeout", default=None, type=float, metavar="S", help="Give up after S seconds (exit 5).")
@common
def wait(ctx, job_ids, timeout):
    """Wait for jobs to end; exit 0 only if all succeeded."""
    from .api import Client
    from .store.jobs import read_job

    for j in job_ids:
        read_job(ctx.client, ctx.ns, j)  # JobNotFound before any waiting
    client = Client(ctx.url, ctx.ns)
    try:
        states = client.wait(list(job_ids), timeout_s=timeout)
    except TimeoutError as e:
        click.echo(f"dispatch: {e}", err=True)
        sys.exit(errors.EXIT_TIMEOUT)
    for j in job_ids:
        click.echo(f"{j}: {states[j]}")
    sys.exit(0 if all(s == "succeeded" for s in states.values()) else errors.EXIT_FAILED)


@cli.command()
@json_flag
@common
def nodes(ctx, as_json):
    """Nodes, their GPUs and what holds them."""
    from .config import Timing
    from .store.nodes import read_nodes

    found, problems = read_nodes(ctx.client, ctx.ns)
    now = now_ms()
    timeout = Timing.from_env().node_timeout_s
    out = [{
        "name": n.name, "alive": n.alive(now, timeout), "seen_s_ago": round((now - n.seen_ms) / 1000, 1),
        "cpus": n.cpus, "mem_gb": n.mem_gb,
        "gpus": [{"index": g.index, "name": g.name, "mem_total_gb": g.mem_total_gb, "mem_used_gb": g.mem_used_gb,
                  "util_pct": g.util_pct, "uuid": g.uuid, "job": n.alloc.get(g.index), "blocked": g.blocked or None}
                 for g in n.gpus],
    } for n in found]
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    rows = []
    for n in out:
        kinds = sorted({g["name"].replace("NVIDIA ", "") for g in n["gpus"]})
        free = sum(1 for g in n["gpus"] if g["job"] is None and not g["blocked"])
        blocked = sum(1 for g in n["gpus"] if g["blocked"])
        state = ("up" if n["alive"] else "LOST") + (f", {blocked} GPU blocked" if blocked else "")
        rows.append([n["name"], state, f"{free}/{len(n['gpus'])}", ",".join(kinds) or "-",
                     n["cpus"], f"{n['mem_gb']:g}", f"{n['seen_s_ago']:g}s"])
    click.echo(_table(rows, ["NODE", "STATE", "FREE", "GPU TYPES", "CPUS", "MEM_GB", "SEEN"]))
    for n in out:
        for g in n["gpus"]:
            if g["blocked"]:
                click.echo(f"{n['name']} GPU {g['index']}: {g['blocked']}")
    for p in problems:
        click.echo(f"warning: {p}", err=True)


@cli.command()
@click.argument("job_id")
@json_flag
@common
def why(ctx, job_id, as_json):
    """Why a job waits: its score terms, its rank, what blocks it, and the decisions about it."""
    from .explain import explain

    out = explain(ctx.client, ctx.ns, job_id)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    job = out["job"]
    click.echo(f"job {job['id']} ({job['name'] or 'no name'}, {job['user']}, {job['priority']}): {job['state']}"
               + (f" on {job['node']} GPUs {job['gpus']}" if job["node"] else ""))
    o = out.get("outcome")
    if o:
        total = sum(out["weights"].values()) or 1.0
        if o.get("terms"):
            parts = " + ".join(f"{k} {v:.1f}x{out['weights'].get(k, 0):g}" for k, v in o["terms"].items())
            click.echo(f"  score {o['score']:.1f} = ({parts}) / {total:g}")
        if o.get("rank"):
            click.echo(f"  rank {o['rank']} of {out['pending']} pending, profile {out['profile']!r} "
                       f"({out['policy_source']}), {out['live_nodes']} live nodes")
        if o["code"] == "would_start":
            click.echo(f"  would start now on {o['node']} GPUs {o['gpus']} ({o['reason']}); "
                       "the scheduler places it at its next cycle")
        else:
            click.echo(f"  blocked ({o['code']}): {o['reason']}")
    for r in out.get("reservations", []):
        if r["job"] != job["id"]:
            click.echo(f"  reservation: job {r['job']} holds {r['node']} GPUs {r['gpus']} from ~{r['starts_in_s']:g}s")
    if out.get("forecast"):
        from .forecast import describe

        click.echo(f"  forecast: {describe(out['forecast'], with_job=False)}")
    for d in out["decisions"]:
        when = time.strftime("%H:%M:%S", time.localtime(d["time"]))
        click.echo(f"  decision {when}: started on {d['node']} GPUs {d['gpus']}, score {d['score']:.1f}: {d['why']}")


@cli.command()
@click.argument("job_id")
@json_flag
@common
def eta(ctx, job_id, as_json):
    """When a pending job is expected to start, and the quickest change that would start it sooner."""
    from .forecast import describe, read_eta

    out = read_eta(ctx.client, ctx.ns, job_id)
    click.echo(json.dumps(out, indent=1) if as_json else describe(out))


@cli.command()
@click.option("--job", "job_id", default=None, help="Only decisions about this job.")
@click.option("--limit", default=20, type=click.IntRange(1, 2000), show_default=True)
@json_flag
@common
def decisions(ctx, job_id, limit, as_json):
    """The scheduler's latest decisions: each start, its score breakdown and why it won."""
    from .store.decisions import read_decisions

    got = read_decisions(ctx.client, ctx.ns, job_id=job_id, limit=limit)
    if as_json:
        click.echo(json.dumps(got, indent=1))
        return
    rows = [[time.strftime("%H:%M:%S", time.localtime(d["time"])), d["job"], f"{d['node']}:{','.join(map(str, d['gpus']))}",
             f"{d['score']:.1f}", " ".join(f"{k[:4]}={v:.0f}" for k, v in d["terms"].items()), d["profile"],
             d["why"][:80]] for d in got]
    click.echo(_table(rows, ["TIME", "JOB", "PLACED", "SCORE", "TERMS", "PROFILE", "WHY"]))


@cli.group()
def policy():
    """Check a policy file, or show the policy in force."""


@policy.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def policy_check(path):
    """Validate a policy file: exit 0 and a summary, or one line naming the bad key."""
    from .policy_source import load_policy_file

    pset, _ = load_policy_file(path)
    for name, cfg in pset.profiles.items():
        w = cfg.weights
        step = 100.0 / 3 * w.get("priority", 0.0)
        rest = 100.0 * sum(v for k, v in w.items() if k != "priority")
        crossing = "classes never cross" if step > rest else "aging and the other terms can lift a job past a class"
        click.echo(f"profile {name}: weights {w}; {crossing}")
    for e in pset.schedule:
        click.echo(f"schedule: {e.profile} from {e.from_min // 60:02d}:{e.from_min % 60:02d} to "
                   f"{e.to_min // 60:02d}:{e.to_min % 60:02d}")
    teams = next(iter(pset.profiles.values())).teams
    for t, q in teams.items():
        click.echo(f"team {t}: guarantee {q.guarantee_gpus} GPUs, limit {q.limit_gpus if q.limit_gpus is not None else 'none'}")
    click.echo(f"{path}: ok")


@policy.command("show")
@json_flag
@common
def policy_show(ctx, as_json):
    """The policy in force: the profile the scheduler runs now, with every setting."""
    from .explain import policy_in_force
    from .policy.profiles import describe

    profile, config, source = policy_in_force(ctx.client, ctx.ns)
    out = {"profile": profile, "source": source, "settings": describe(config)}
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(f"profile {profile} from {source}")
    for k, v in out["settings"].items():
        click.echo(f"  {k}: {v}")


def _alerts_option(fn):
    return click.option("--alerts", default=None, envvar="DISPATCH_ALERTS", metavar="KEY=VALUE,...",
                        help="Alert thresholds, e.g. critical_wait=5m,high_wait=30m,low_util=50,low_util_for=30m "
                             "(docs/dashboard.md; idle GPUs: the policy's idle_warn).")(fn)


def _board(ctx, alerts):
    from .alerts import AlertConfig
    from .board import Board
    from .config import Timing

    return Board(ctx.client, ctx.ns, timing=Timing.from_env(), alerts=AlertConfig.parse(alerts))


@cli.command()
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and logs).")
@click.option("--interval", default=2.0, type=click.FloatRange(0.2), show_default=True, help="Seconds between frames.")
@_alerts_option
@common
def top(ctx, once, interval, alerts):
    """A live terminal view: queue by class, GPUs per node, decisions, usage, alerts."""
    from .top import run

    run(_board(ctx, alerts), interval_s=interval, once=once)


# -- long-running parts ---------------------------------------------------------------------
def _stop_on_signals(event) -> None:
    def handler(signum, frame):
        event.set()
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


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
    from .identity import Verifier, load_secret

    return Verifier(load_secret(secret_file), [a for a in admins.split(",") if a])


@cli.command()
@_policy_option
@_secret_option
@common
def scheduler(ctx, policy_path, secret_file, admins):
    """Run the scoring scheduler (one per cluster)."""
    import threading

    from .config import Timing
    from .policy_source import PolicySource
    from .scheduler import Scheduler

    _setup_logging(ctx.debug)
    source = PolicySource(policy_path)
    stop = threading.Event()
    _stop_on_signals(stop)
    sched = Scheduler(ctx.client, ctx.ns, policy=source, timing=Timing.from_env(),
                      verifier=_verifier(secret_file, admins))
    click.echo(f"dispatch scheduler on {ctx.url} (namespace {ctx.ns}); leads while it holds the lease, "
               "else stands by", err=True)
    sched.run(stop)


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
                      help="Run each job as its submitting Unix user (the agent must run as root).")(fn)
    return fn


def _run_agent(ctx, node, opts: dict, verifier=None, before_shutdown=None):
    """`opts`: the values of _node_options."""
    from .config import Timing, state_dir
    from workers.agent import NodeAgent
    from workers.gpu import open_probe

    if not _NODE_NAME.match(node):
        raise InvalidRequestError(f"--node: {node!r} may hold only letters, digits and _.- (at most 64)",
                                  field="--node")
    if opts["run_as_user"] and os.geteuid() != 0:
        raise InvalidRequestError("--run-as-user: the node agent must run as root to start jobs as their users",
                                  field="--run-as-user")
    probe = open_probe(opts["fake_gpus"], node)
    agent = NodeAgent(ctx.client, ctx.ns, node, probe, cpus=opts["cpus"], mem_gb=opts["mem_gb"],
                      work_dir=opts["work_dir"] or state_dir() / "node" / node, timing=Timing.from_env(),
                      url=ctx.url, run_as_user=opts["run_as_user"], verifier=verifier,
                      kill_zombies=opts["kill_zombies"])
    agent.run(before_shutdown)


@cli.command()
@click.option("--node", default=None, help="Node name (default: the host name).")
@_node_options
@_secret_option
@common
def worker(ctx, node, secret_file, admins, **node_opts):
    """Run a node agent on this GPU host: heartbeat its GPUs and run the jobs placed on it."""
    import socket

    _setup_logging(ctx.debug)
    _run_agent(ctx, node or socket.gethostname().split(".")[0], node_opts, _verifier(secret_file, admins))


def _dashboard_options(fn):
    fn = click.option("--allow-cancel", is_flag=True,
                      help="Let the page cancel jobs (with identity on: the owner's or an admin's token).")(fn)
    return _alerts_option(fn)


def _serve_dashboard(ctx, host, port, allow_cancel, alerts):
    """The dashboard's server, listening (not yet serving)."""
    from .dashboard import make_server

    server = make_server(_board(ctx, alerts), host, port, allow_cancel=allow_cancel)
    click.echo(f"dispatch: dashboard on http://{host}:{server.port}/ (metrics at /metrics)"
               + ("" if allow_cancel else ", read-only"), err=True)
    return server


@cli.command()
@click.option("--host", default="127.0.0.1", envvar="DISPATCH_DASHBOARD_HOST", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", default=DASHBOARD_PORT, type=click.IntRange(0, 65535), envvar="DISPATCH_DASHBOARD_PORT",
              show_default=True, help="Port (0: any free one).")
@_dashboard_options
@common
def dashboard(ctx, host, port, allow_cancel, alerts):
    """The web dashboard and Prometheus /metrics: queue, GPUs, decisions, usage, alerts; live."""
    server = _serve_dashboard(ctx, host, port, allow_cancel, alerts)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@cli.command()
@click.option("--node", default=None, help="Name of the local node (default: the host name).")
@click.option("--port", default=None, type=click.IntRange(1, 65535), help="Port of the embedded server.")
@click.option("--fsync", default="everysec", type=click.Choice(["everysec", "always"]),
              help="Embedded server: append-only file synced every second (default) or on every write "
                   "(docs/guarantees.md).")
@click.option("--dashboard-port", default=DASHBOARD_PORT, type=click.IntRange(0, 65535), show_default=True,
              envvar="DISPATCH_DASHBOARD_PORT", help="Port of the dashboard, on 127.0.0.1 (0: any free one).")
@click.option("--no-dashboard", is_flag=True, help="Do not start the dashboard.")
@_dashboard_options
@_node_options
@_policy_option
@_secret_option
@common
def up(ctx, node, port, fsync, dashboard_port, no_dashboard, allow_cancel, alerts, policy_path, secret_file, admins,
       **node_opts):
    """All in one: embedded Redis (unless --redis is given), the scheduler and a local node agent."""
    import socket
    import threading

    from .alerts import AlertConfig
    from .config import Timing, forget_server, record_server, state_dir
    from .embedded import EmbeddedServer
    from .policy_source import PolicySource
    from .scheduler import Scheduler

    _setup_logging(ctx.debug)
    source = PolicySource(policy_path)  # a bad policy file stops `up` before anything starts
    AlertConfig.parse(alerts)  # and so do bad alert thresholds
    if not node_opts["fake_gpus"]:  # fail before starting anything if this host has no GPUs to offer
        from workers.gpu import NvmlProbe

        NvmlProbe().close()
    server = None
    if ctx._url_flag is None:
        server = EmbeddedServer(state_dir() / "data", port, fsync=fsync).start()
        ctx._url_flag = server.url
        record_server(server.url, os.getpid())
        click.echo(f"dispatch: embedded server on {server.url}, data in {server.data_dir}", err=True)
    stop = threading.Event()
    verifier = _verifier(secret_file, admins)
    sched = Scheduler(ctx.client, ctx.ns, policy=source, timing=Timing.from_env(), verifier=verifier)
    sched_thread = threading.Thread(target=sched.run, args=(stop,), name="scheduler", daemon=True)
    sched_thread.start()
    web = None
    if not no_dashboard:
        try:
            web = _serve_dashboard(ctx, "127.0.0.1", dashboard_port, allow_cancel, alerts)
            threading.Thread(target=web.serve_forever, name="dashboard", daemon=True).start()
        except errors.ConfigError as e:  # a taken port costs the page, not the cluster
            click.echo(f"dispatch: warning: no dashboard: {e}", err=True)

    def stop_scheduler():
        stop.set()
        sched_thread.join(5)

    try:
        click.echo("dispatch: scheduler and node agent running; Ctrl-C stops everything", err=True)
        _run_agent(ctx, node or socket.gethostname().split(".")[0], node_opts, verifier, stop_scheduler)
    finally:
        stop_scheduler()
        if web is not None:
            web.shutdown()
        if server is not None:
            forget_server(os.getpid())
            server.stop()
        click.echo("dispatch: stopped", err=True)


@cli.group()
def auth():
    """Identity (docs/security.md): per-user tokens for signed requests."""


@auth.command("token")
@click.argument("user")
@click.option("--secret-file", required=True, type=click.Path(dir_okay=False), help="The lab secret (chmod 600).")
def auth_token(user, secret_file):
    """Print USER's token (give it to them for $DISPATCH_TOKEN or ~/.config/dispatch/token)."""
    from .identity import load_secret, token_for
    from .spec import _label

    click.echo(token_for(load_secret(secret_file), _label(user, "USER")))


@cli.command()
@click.option("--csv", "as_csv", is_flag=True, required=True, help="Print finished jobs in the trace format.")
@click.option("--since", default=None, metavar="DURATION", help="Only jobs submitted this long ago or later (e.g. 7d).")
@common
def history(ctx, as_csv, since):
    """Finished jobs in the trace format, to replay a lab's own week with `dispatch simulate`."""
    from .cli_lab import history_csv

    click.echo(history_csv(ctx.client, ctx.ns, since), nl=False)


from .cli_lab import simulate  # noqa: E402  (imports nothing heavy at module level)

cli.add_command(simulate)


def main() -> None:
    debug = "--debug" in sys.argv
    try:
        rv = cli.main(standalone_mode=False, prog_name="dispatch")
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except DispatcherError as e:
        if debug:
            raise
        click.echo(f"dispatch: error: {e}", err=True)
        sys.exit(e.exit_code)
    except Exception as e:
        if debug:
            raise
        import redis

        if isinstance(e, redis.exceptions.RedisError):
            click.echo(f"dispatch: error: Redis failed: {e} (is the server up? see `dispatch up`)", err=True)
            sys.exit(errors.EXIT_CONNECT)
        click.echo(f"dispatch: internal error: {type(e).__name__}: {e} (rerun with --debug for details)",
                   err=True)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)

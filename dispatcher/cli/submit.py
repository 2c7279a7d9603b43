"""`dispatch submit`, alone in its module so that the command run most defines nothing else
(registered lazily in cli.py). Its flags are the request's fields (core/spec.py REQUEST_FIELDS),
checked there: a gang's --nodes, --gpus-per-node and --gpus against each other too."""

from __future__ import annotations

import json
import os
import shlex
import sys

import click

from . import common
from .flags import resources
from ..clock import now_ms
from ..core.arrays import label
from ..core.errors import InvalidRequestError
from ..auth.identity import caller_dir, current_user


@click.command(context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False})
@resources()
@click.option("--user", default=None, help="Owner (default: $USER).")
@click.option("--nodes", "-N", "nodes", default=None, metavar="N",
              help="A gang: exactly N nodes at once, the command run once on each (torchrun's NNODES, NODE_RANK).")
@click.option("--gpus-per-node", default=None, metavar="G", help="With --nodes: GPUs on each node (--gpus is N x G).")
@click.option("--same-type/--mixed-types", default=True,
              help="Every node of a gang on one GPU family (the default), or any mix.")
@click.option("--hang-timeout", default=None, metavar="DURATION",
              help="Restart the job (every rank) as a lost attempt if no progress is reported for this long: 30m.")
@click.option("--scaling", default=None, metavar="MODEL",
              help="With --gpus MIN-MAX: linear, amdahl:P or a table like 1:10h,2:5.5h,4:3h,8:1.5h (--est is "
                   "the run time on MAX GPUs).")
@click.option("--est", default=None, metavar="DURATION", help="Estimated run time: 90s, 15m, 2h.")
@click.option("--checkpointable", is_flag=True, help="The job can save a checkpoint and resume.")
@click.option("--share", is_flag=True, help="May share its GPUs with other --share jobs, within --gpu-mem each.")
@click.option("--min-gpus", default=None, metavar="N", help="Elastic: may be shrunk to N GPUs (needs --checkpointable).")
@click.option("--preemptible", is_flag=True, help="May be killed (forced preemption) by any higher class.")
@click.option("--checkpoint-signal", default="TERM", metavar="SIG", help="Signal that asks for a checkpoint.")
@click.option("--grace", default="30s", metavar="DURATION", help="Time between SIGTERM and SIGKILL.")
@click.option("--retries", default="3", metavar="N",
              help="Reruns after an attempt is lost with its node (agent or host died); then the job fails.")
@click.option("--retry-failed", "retry_failed", default="0", metavar="N",
              help="Run an attempt that failed (a non-zero exit, a signal dispatch did not send) again, up to N "
                   "times (RQ's Retry, Kubernetes' backoffLimit); not one cancelled or over its --time.")
@click.option("--after", multiple=True, metavar="JOB[,JOB]",
              help="Start once these jobs all succeeded; if one fails or is cancelled, this one fails too. An "
                   "array's id is all its elements, 12_5 one element. Repeatable.")
@click.option("--after-any", "after_any", multiple=True, metavar="JOB[,JOB]",
              help="Start once these jobs all ended, however they ended (an array's id: all its elements). "
                   "Repeatable.")
@click.option("--dependency", "-d", "dependency", default=None, metavar="afterok:ID[:ID],afterany:ID",
              help="Slurm's form of --after (afterok) and --after-any (afterany).")
@click.option("--array", "-a", "array", default=None, metavar="SPEC",
              help="A job array: one job per index, e.g. 0-99%8 (at most 8 at once) or 1,3,5-9; each gets "
                   "DISPATCH_ARRAY_INDEX. Prints the array's id.")
@click.option("--output", "-o", "output", default=None, metavar="PATTERN",
              help="Also append the output to this file on the node as it runs (Slurm's): %j job id, %A array "
                   "id, %a index, %u user, %x name, %n node, %r rank, %% a %; relative to --cwd. E.g. logs/%x-%j.out.")
@click.option("--notify", default=None, metavar="CMD|URL",
              help="When the job ends: run CMD on its node as its user, with DISPATCH_JOB_ID, DISPATCH_JOB_STATE, "
                   "DISPATCH_EXIT_CODE, DISPATCH_REASON, DISPATCH_JOB_NAME set, or POST its end as JSON to an "
                   "http(s) URL.")
@click.option("--begin", "-b", "begin", default=None, metavar="TIME",
              help="Start no earlier than TIME (Slurm's --begin); until then it waits, pending: now+1hour, now+90 "
                   "(seconds), 16:00 (the next one), 2026-12-24T09:00, midnight, noon or tomorrow. Local time.")
@click.option("--hold", "-H", "held", is_flag=True,
              help="Submit the job held (Slurm's sbatch --hold): it waits until `dispatch release`.")
@click.option("--env", "env", multiple=True, metavar="K=V", help="Environment variable for the job (repeatable).")
@click.option("--cwd", "--chdir", "-D", "cwd", default=None, metavar="DIR",
              help="Working directory on the node (default: the current one; a relative one is taken from it; "
                   "sbatch's --chdir, -D).")
@click.option("--from", "from_file", default=None, type=click.File("r"), metavar="FILE.jsonl",
              help="Submit many jobs, one JSON object per line ({\"command\": [...], \"gpus\": 2, ...}; "
                   "the flags give defaults); all or nothing. '-' reads standard input.")
@click.option("--wrap", default=None, metavar="CMD", help="Run CMD with sh -c (sbatch --wrap), instead of a command "
                                                             "after --.")
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
@common
def submit(ctx, from_file, command, held, dependency, wrap, **flags):
    """Submit a job: dispatch submit --gpus 2 --gpu-type A100 -- python train.py. Prints the job id."""
    from . import jobside
    from ..core.memo import gc_paused
    from ..begin import resolved
    from ..core.spec import spec_from_request
    from ..core.arrays import request_jobs
    from ..core.selection import pieces
    from ..core.fields import parse_dependency
    from ..store.requests import submit_specs

    given = click.get_current_context().get_parameter_source  # (flags left at their defaults are the spec's)
    defaults = {k: v for k, v in flags.items() if given(k) is not click.core.ParameterSource.DEFAULT}
    for flag in ("after", "after_any"):  # repeated or comma-separated, every id counts ('' is refused)
        if flag in defaults:
            defaults[flag] = [i for value in defaults[flag] for i in pieces(value)]  # (12_[0,1] is one)
    if dependency is not None:
        for flag, ids in parse_dependency(dependency).items():
            if ids:
                defaults[flag] = [*defaults.get(flag, []), *ids]
    if wrap is not None:
        if not wrap.strip():  # (`--wrap "$CMD"` with CMD unset ran `sh -c ''` on a GPU, and "succeeded")
            raise InvalidRequestError("--wrap: empty; give the command to run, e.g. --wrap 'python train.py'",
                                      field="--wrap")
        if command:
            raise InvalidRequestError("give either --wrap CMD or a command after --, not both", field="--wrap")
        command = ("sh", "-c", wrap)
    now, here, me = now_ms(), caller_dir(), current_user()
    if from_file is not None and command:
        raise InvalidRequestError("give either a command or --from FILE, not both", field="--from")

    def build(request):
        spec = spec_from_request(resolved(request, now), user=me, submit_ms=now, cwd=here)
        if spec.cwd and os.path.exists(spec.cwd) and not os.path.isdir(spec.cwd):  # (a typo that fails every run)
            raise InvalidRequestError(f"--chdir {spec.cwd}: is a file, not a directory", field="--chdir")
        return spec

    with gc_paused():
        if from_file is None:
            specs = request_jobs({**defaults, "command": list(command)}, build, "0")
        else:
            specs, lines = _from_lines(from_file, defaults, build)
        inside = ctx._url_flag is None and jobside.in_job()
        try:
            ids = jobside.submit(specs, held) if inside else submit_specs(ctx.client, ctx.ns, specs, me, held)
        except InvalidRequestError as e:  # (a dependency that names no job: said with its line, as the rest)
            if from_file is None:
                raise
            raise InvalidRequestError(_with_line(str(e), from_file.name, specs, lines), field="--from") from None
    click.echo("\n".join(ids[i] for i, s in enumerate(specs) if not s.array_of or i == 0
                          or s.array_of != specs[i - 1].array_of))  # an array: its id (its first element's)
    if not inside:
        sys.stdout.flush()
        warn_about_the_command(list(command), specs[0].cwd or here if specs else here)  # (where it runs: --cwd)
        warn_if_no_node_could_hold(ctx, specs, ids)
        warn_if_past_a_team_limit(ctx, specs, ids)
        warn_if_a_dependency_failed(ctx, specs, ids)


def _from_lines(from_file, defaults: dict, build) -> list:
    """The jobs of --from FILE.jsonl, one request a line (blank lines skipped; the flags give defaults).
    A file that is not UTF-8 text, or that holds no job, is refused: nothing submitted is no success."""
    from ..core.arrays import request_jobs

    specs, lines, n = [], [], 0
    try:
        for n, line in enumerate(from_file, 1):
            if not line.strip():
                continue
            try:
                request = json.loads(line, parse_constant=_not_json)
                specs += request_jobs({**defaults, **request} if isinstance(request, dict) else request,
                                      build, str(n))
                lines += [n] * (len(specs) - len(lines))
            except json.JSONDecodeError as e:
                raise InvalidRequestError(f"{from_file.name} line {n}: not JSON ({e.msg})", field="--from") from None
            except InvalidRequestError as e:
                raise InvalidRequestError(f"{from_file.name} line {n}: {e}", field="--from") from None
    except UnicodeDecodeError:
        raise InvalidRequestError(f"--from {from_file.name}: not UTF-8 text (line {n + 1}); save it as UTF-8",
                                  field="--from") from None
    if not specs:
        raise InvalidRequestError(f"--from {from_file.name}: no jobs in it; give one JSON object a line, e.g. "
                                  '{"command": ["python", "train.py"], "gpus": 1}', field="--from")
    return specs, lines


def _not_json(word: str):
    """NaN and Infinity, which Python's json takes and JSON has not."""
    raise json.JSONDecodeError(f"{word} is no JSON number", word, 0)


def _with_line(message: str, name: str, specs: list, lines: list[int]) -> str:
    """A refusal of the whole file, with the line of the first job whose dependencies it names."""
    import re

    for spec, n in zip(specs, lines):
        if any(re.search(rf"\bjob {re.escape(d)}\b", message) for d in (*spec.after, *spec.after_any)):
            return f"{name} line {n}: {message}"
    return f"--from {name}: {message}"


def warn_about_the_command(command: list[str], here: str) -> None:
    """A warning on stderr for a command as a Slurm or task-spooler user may write it, which the node
    would not run as they mean: a script in this folder named without ./ (the node looks it up on its
    PATH), a shell line given as one word (no shell reads it), a script whose #SBATCH lines would be
    taken as flags (dispatch reads none)."""
    import os
    import shutil

    if not command:
        return
    first = command[0]
    path = os.path.join(here, first)
    if "/" not in first and not shutil.which(first) and os.path.isfile(path):
        click.echo(f"dispatch: warning: {first!r} is not on PATH: the node runs it only if its PATH has it; "
                   f"for the file in this folder: dispatch submit ... -- ./{first}", err=True)
    elif len(command) == 1 and any(c in first for c in " ;|&<>$") and not os.path.exists(path):
        click.echo(f"dispatch: warning: {first!r} is run as one program's name, not by a shell; for a shell "
                   f"line: dispatch submit ... -- sh -c {shlex.quote(first)}", err=True)
    elif "/" in first and os.path.isfile(path) and not os.access(path, os.X_OK):
        click.echo(f"dispatch: warning: {first} is not executable: the node cannot run it (Permission denied); "
                   f"chmod +x {shlex.quote(first)}, or give its interpreter: dispatch submit ... -- sh {first}", err=True)
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return
    if head.startswith(b"#!") and b"\n#SBATCH" in head:
        click.echo(f"dispatch: warning: {first} has #SBATCH lines, which dispatch does not read: give them as "
                   "submit's flags (--gpus, --time, --name, --output, --array)", err=True)


def warn_if_no_node_could_hold(ctx, specs, ids) -> None:
    """A warning on stderr for a job that no registered node could ever hold, with the policy's own
    reason (policy.verdicts.NeverFit on its least, core.elastic.smallest, as the policy judges it and
    `dispatch why` says it). It stays queued: nodes may join."""
    from ..store.nodes import read_nodes

    found, _ = read_nodes(ctx.client, ctx.ns)
    if not found:  # none registered yet (`dispatch up` just started): nothing to judge by; a namespace
        from ..store import keys  # with no scheduler either, beside the default one's, is most likely a typo

        default = keys.DEFAULT_NS
        if ctx.ns != default and not ctx.client.exists(keys.scheduler_leader(ctx.ns)) \
                and ctx.client.exists(keys.scheduler_leader(default)):
            click.echo(f"dispatch: warning: nothing runs jobs in namespace {ctx.ns!r} (no scheduler, no node; one "
                       f"runs in {default!r}): {'they wait' if len(ids) > 1 else 'it waits'} until one starts; is "
                       "--namespace (or DISPATCH_NAMESPACE) the cluster's?", err=True)
        return
    from ..core.elastic import smallest

    least = [smallest(s) for s in specs]  # an elastic job (--gpus 2-8) runs on its least: judged by it
    if all(_plainly_fits(s, found) for s in least):  # the usual request: no need to load the policy (40 ms)
        return
    from ..core.plan import NodeView
    from ..policy.fit import GpuMemo
    from ..policy.verdicts import NeverFit

    views = [NodeView(n.name, n.gpus, n.cpus, n.mem_gb, (), 0, 0.0) for n in found]
    never = NeverFit(views, gangs=True, fit=GpuMemo())
    firsts = [k for k, s in enumerate(specs) if not s.array_of or k == 0 or specs[k - 1].array_of != s.array_of]
    bad = [(f"{'array' if specs[k].array_of else 'job'} {ids[k]}", least[k]) for k in firsts if never.check(least[k])]
    for what, spec in bad[:3]:
        click.echo(f"dispatch: warning: {what} {never.reason(spec).replace('live node', 'registered node')}; "
                   "it stays queued until a node that can joins", err=True)
    if len(bad) > 3:
        click.echo(f"dispatch: warning: and {len(bad) - 3} more jobs that no registered node could hold", err=True)


def warn_if_past_a_team_limit(ctx, specs, ids) -> None:
    """A warning on stderr for a job that asks more GPUs (at its least) than its team may hold at once in
    every profile of the policy in force: it waits until the limit is raised."""
    if not any(s.team for s in specs):
        return
    from ..core.elastic import smallest
    from ..core.errors import ConfigError
    from ..policy.profiles import parse_policy
    from ..store.policies import read_policy

    try:
        profiles = parse_policy(read_policy(ctx.client, ctx.ns).get("text") or "").profiles.values()
    except ConfigError:  # (the scheduler says what is wrong with it)
        return
    for k, spec in enumerate(specs):
        limits = [q.limit_gpus for c in profiles for q in [c.teams.get(spec.team)] if q and q.limit_gpus is not None]
        least = smallest(spec).gpus
        if spec.team and len(limits) == len(profiles) and least > max(limits):
            click.echo(f"dispatch: warning: job {ids[k]} asks {least} GPUs; team {spec.team} may hold "
                       f"{max(limits)} at most (the policy's limit_gpus): it waits until the limit is raised",
                       err=True)
            return


def warn_if_a_dependency_failed(ctx, specs, ids) -> None:
    """A warning on stderr for a job whose --after names a job that already failed or was cancelled: it
    was submitted, and fails at the scheduler's next cycle with that reason (as documented)."""
    from ..store.jobs import read_jobs
    from ..store.naming import named_jobs

    after = list(dict.fromkeys(d for s in specs for d in s.after))
    if not after:
        return
    names = named_jobs(ctx.client, ctx.ns, after)
    ended = {j["id"]: j for j in read_jobs(ctx.client, ctx.ns, [i for d in after for i in names[d] or ()])
             if j["state"] in ("failed", "cancelled")}
    for k, spec in enumerate(specs):
        gone = next((ended[i] for d in spec.after for i in names[d] or () if i in ended), None)
        if gone is not None:
            how = "failed" if gone["state"] == "failed" else "was cancelled"
            click.echo(f"dispatch: warning: job {ids[k]} waits for job {label(gone)}, which {how}: it will fail too "
                       "(--after-any waits for any end)", err=True)
            return  # (one line: an array's elements, a batch, depend alike)


def _plainly_fits(spec, nodes) -> bool:
    """A sufficient sign that some node could hold `spec`: a one-node request with no GPU type or memory
    asked, and a node with that many unblocked GPUs, CPUs and memory. Anything else the policy judges."""
    return not (spec.gpu_types or spec.gpu_mem_gb or spec.nodes) and any(
        spec.cpus <= n.cpus and spec.mem_gb <= n.mem_gb and spec.gpus <= sum(not g.blocked for g in n.gpus)
        for n in nodes)

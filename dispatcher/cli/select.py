"""Which jobs a command means: ids, ranges (`60-66`) and filters (`-u/--user`, `--state`,
`--name` globs, `--team`), as `squeue -u`/`scancel -u --state --name` take them. One reading for
queue, cancel and wait; pure but for the read of the queue it is given."""

from __future__ import annotations

import click

from ..core.arrays import is_number, label
from ..core.errors import InvalidRequestError
from ..core.selection import STATE_GROUPS, Selection, selection  # noqa: F401 (the commands import them here)


def filter_options(fn):
    """-u/--user, -t/--state (squeue's -t), --name, --team: repeatable or comma-separated; --name takes globs;
    --me, squeue's and scancel's: -u with your own name."""
    import functools

    command = fn

    @functools.wraps(command)
    def with_me(*args, me: bool = False, users=(), **kwargs):
        if me:
            from ..auth.identity import current_user

            users = (*users, current_user())
        return command(*args, users=users, **kwargs)

    fn = click.option("--me", "me", is_flag=True, help="Only your own jobs (as -u with your name).")(with_me)
    for flag, short, what in (("--team", None, "TEAM"), ("--name", None, "GLOB"),
                              ("--state", "-t", "STATE"), ("--user", "-u", "USER")):
        names = [short, flag] if short else [flag]
        fn = click.option(*names, flag.lstrip("-") + "s", multiple=True, metavar=what,
                          help=f"Only jobs of this {flag.lstrip('-')} (repeatable, or comma-separated"
                               + ("; shell globs like 'sweep-*'" if flag == "--name" else "")
                               + ("; or active, done, all" if flag == "--state" else "") + ").")(fn)
    return fn


#: What `dispatch queue` lists with no filter: the oldest pending jobs (and every running one).
SHOWN = 1000
#: With a filter, every pending job is looked at: `cancel -u alice` must reach all of alice's jobs.
EVERY = 10**9


def resolve(client, ns: str, sel: Selection, *, include_final: bool, limit: int = SHOWN,
            missing: list | None = None) -> list[dict]:
    """The jobs a command acts on. Ids given: those jobs (every one must exist, checked before
    anything is done; with `missing`, a list, the ids that name no job are appended to it instead, for
    act_each to report), kept if they pass the filters. Otherwise the matching jobs of the queue: pending
    and running (with include_final, the latest finished ones too), the oldest `limit` pending ones
    without a filter, all of them with one."""
    from ..store.jobs import read_named, read_queue

    if sel.ids:
        jobs = read_named(client, ns, sel.ids, missing=missing)
    else:
        jobs = read_queue(client, ns, include_final=include_final, limit=EVERY if sel.filtered else limit)
    return [j for j in jobs if sel.matches(j)]


def not_found(ids: list[str]) -> list[str]:
    """The error lines for ids that name no job: one an id, one a run of consecutive ids (a range that
    reaches past the newest job: `no jobs with ids 38 to 500`; an array's elements past its last:
    `no jobs with ids 34_8 to 34_99`)."""
    from ..core.errors import JobNotFound

    def split(i: str) -> tuple[str, int] | None:  # "34_8" -> ("34_", 8), "38" -> ("", 38)
        head, _, n = i.rpartition("_")
        return (head + "_" if head else "", int(n)) if is_number(n) and (not head or is_number(head)) else None

    runs: list[list[str]] = []
    for i in ids:
        last = split(runs[-1][1]) if runs else None
        here = split(i)
        if last and here and last[0] == here[0] and last[1] + 1 == here[1]:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return [str(JobNotFound(lo)) if lo == hi else f"no jobs with ids {lo} to {hi} ({JobNotFound(lo).hint})"
            for lo, hi in runs]


def say_not_found(missing) -> None:
    """One error line on stderr per id, or run of ids, of `missing` (not_found's)."""
    for line in not_found(list(missing)):
        click.echo(f"dispatch: error: {line}", err=True)


def needs_some(sel: Selection, verb: str) -> Selection:
    """A command that acts on jobs needs ids or a filter: never every job by default."""
    if not sel.ids and not sel.filtered:
        raise InvalidRequestError(f"which jobs? give job ids (7, 60-66) or a filter (-u USER, --state, --name, "
                                  f"--team) to {verb}", field="JOB")
    return sel


def cut_last(rows: list[list], header: list[str]) -> list[list]:
    """On a terminal, the last column (a command) cut so that each line fits its width; piped, whole."""
    import shutil
    import sys

    if not rows or header[-1] != "COMMAND" or not sys.stdout.isatty():
        return rows
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header) - 1)]
    room = max(20, shutil.get_terminal_size().columns - sum(widths) - 2 * (len(header) - 1))
    return [r[:-1] + [r[-1] if len(r[-1]) <= room else r[-1][:room - 1] + "…"] for r in rows]


def act_each(ctx, kind: str, jobs: list[dict], local, say=lambda outcome, job: str(outcome), missing=(),
             **extra) -> None:
    """Carry out `kind` (cancel, hold, release, update) on each job, in order: as a signed request the
    leader carries out under identity (with `extra` in its body), else `local(job_id)`; prints
    "<id>: <say(outcome, job)>" for each (`job` as read before). A job that refuses (not pending, not yours, gone) is one error
    line and the others go on, as scancel and scontrol do for a list or an array; so is each id of
    `missing` (resolve's: ids that name no job), said first. The command then exits with the first
    refusal's code. Jobs are named as people name them: an array's element as 12_5 (label)."""
    from ..auth.identity import NotAllowed, current_user
    from ..core.errors import EXIT_NOT_FOUND, InvalidStateError, NotFoundError
    from ..core.model import FINAL_STATES
    from ..store.requests import act_signed, identity_on

    say_not_found(missing)
    refused = click.exceptions.Exit(EXIT_NOT_FOUND) if missing else None
    if not jobs and not missing:
        click.echo("dispatch: no job matches", err=True)
    ended = [j for j in jobs if j.get("state") in FINAL_STATES] if kind != "requeue" else []
    if len(ended) > MANY_ENDED:  # (a range over old jobs: one line for them, not one each)
        jobs = [j for j in jobs if j.get("state") not in FINAL_STATES]
        said = f"{len(ended)} of these jobs had ended already ({_ids(ended)}): nothing to {kind} there"
        click.echo(f"{'' if kind == 'cancel' else 'dispatch: error: '}{said}", err=kind != "cancel")
        if kind != "cancel":  # (a cancel of an ended job is no refusal: each would say "already cancelled")
            refused = refused or click.exceptions.Exit(InvalidStateError.exit_code)
    signed = jobs and identity_on(ctx.client, ctx.ns)
    said: dict[int, tuple[str, bool]] = {}  # place in `jobs` -> (its line, an error)
    for k in _order(kind, jobs):
        job = jobs[k]
        try:
            outcome = act_signed(ctx.client, ctx.ns, kind, current_user(), job["id"], **extra) if signed \
                else local(job["id"])
        except (InvalidStateError, NotFoundError, NotAllowed, InvalidRequestError) as e:
            said[k] = (f"dispatch: error: {named(str(e), job)}", True)
            refused = refused or click.exceptions.Exit(e.exit_code)
            continue
        said[k] = (f"{label(job)}: {say(outcome, job)}", False)  # (an array's element as 12_5)
    for k in range(len(jobs)):  # in the order given
        click.echo(said[k][0], err=said[k][1])
    if refused is not None:
        raise refused


def _order(kind: str, jobs: list[dict]) -> list[int]:
    """The order act_each acts in: as given; a cancel the pending jobs first, then the others, each newest
    first. Nothing a cancel frees may start a job the same command cancels: a job waits only for older ones
    (`cancel 7 8` started job 8, a clean-up step of 7, as 7 was cancelled), and a running job's GPUs may go
    to a pending one (`cancel 109 106`, 106 preempted for 109, started 106 again)."""
    if kind != "cancel":
        return list(range(len(jobs)))
    return sorted(range(len(jobs)), key=lambda k: (jobs[k].get("state") != "pending",
                                                   -int(jobs[k]["id"]) if str(jobs[k]["id"]).isdigit() else 0))


#: Past this many jobs of a list that had ended, act_each says so in one line rather than a line each.
MANY_ENDED = 3


def _ids(jobs: list[dict]) -> str:
    """'1-1140' for jobs 1 to 1140; an array's elements as people name them (12_5)."""
    from ..core.arrays import ranges

    plain = [int(j["id"]) for j in jobs if not j.get("array_of") and str(j["id"]).isdigit()]
    others = [label(j) for j in jobs if j.get("array_of") or not str(j["id"]).isdigit()]
    return ", ".join(p for p in (ranges(plain, 8, steps=False) if plain else "", ", ".join(others[:8])
                                 + (f" and {len(others) - 8} more" if len(others) > 8 else "")) if p)


def named(message: str, job: dict) -> str:
    """A message about `job` written with its id (the store's, the leader's) naming it as people do:
    "job 128 is cancelled" -> "job 127_1 is cancelled" for an array's element."""
    import re

    return re.sub(rf"\bjob {re.escape(job['id'])}\b", lambda _: f"job {label(job)}", message)


def folded(jobs: list[dict], cut=frozenset()) -> list[tuple[str, dict, list[dict]]]:
    """Queue rows: (the ID shown, the job a row is about, the jobs it stands for). An array is one row,
    12_[0-99%8], where its first element listed was, about its oldest pending element (else its
    first); every other job is its own row. An array of `cut` (some of its pending elements left out
    by queue's --limit) shows it: 12_[0-2,…]."""
    from ..core.arrays import ranges

    members: dict[str, list[dict]] = {}
    for j in jobs:
        if j["array_of"]:
            members.setdefault(j["array_of"], []).append(j)
    rows = []
    for j in jobs:
        if not j["array_of"]:
            rows.append((j["id"], j, [j]))
        elif members[j["array_of"]][0] is j:
            group = members[j["array_of"]]
            cap = f"%{j['array_limit']}" if j["array_limit"] else ""
            about = next((g for g in group if g["state"] == "pending"), j)
            more = ",…" if j["array_of"] in cut else ""
            rows.append((f"{j['array_of']}_[{ranges(g['array_index'] for g in group)}{more}{cap}]", about, group))
    return rows


def counts(group: list[dict]) -> str:
    """'8 running, 88 pending, 2 held' (in the order the states first appear; a pending job held by `dispatch
    hold` counts as held)."""
    seen: dict[str, int] = {}
    for j in group:
        state = "held" if j["state"] == "pending" and j.get("hold") else j["state"]
        seen[state] = seen.get(state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in seen.items())

"""`dispatch notebook`: JupyterLab as a job on a GPU node, and the URL to open.

It queues like any job (submit's resource flags, cli/flags.py; the same checks and path: core/spec.py,
store/requests.py) with `--priority high` by default. The job runs JupyterLab from its own environment
(`jupyter lab` on the node's PATH, or `PYTHON -m jupyterlab` with --python) behind a one-line launcher
(LAUNCHER) that takes a port free in --port-range on the node's advertised address
($DISPATCH_NODE_ADDRESS, workers/jobenv.py). The token is the client's (secrets.token_hex), given in
the job's environment as JUPYTER_TOKEN, which JupyterLab reads, never on a command line that `ps` shows
on the node; JupyterLab prints its URL with the token masked, so the log holds no token either. The
client follows the job's log until that URL appears and prints it, with the node's address and the
token, as the one line on stdout.
"""

from __future__ import annotations

import re
import secrets
import sys
import time

import click

from . import common
from .flags import resources, session_request
from ..clock import now_ms
from ..core.errors import DispatcherError, InvalidRequestError, InvalidStateError, JobNotFound
from ..auth.identity import NOTEBOOK_NONCE, NotAllowed, caller_dir, current_user, notebook_token

#: Run by the job's python: a port in the range (argv[1], "LOW-HIGH") that nothing listens on at the
#: node's address, then JupyterLab (argv[2:]) bound there. One line, as `dispatch queue` shows it.
LAUNCHER = "; ".join((  # (double quotes only: `dispatch queue` shows it as one '...')
    'import os, random, shutil, socket, sys',
    'a = os.environ.get("DISPATCH_NODE_ADDRESS") or "127.0.0.1"',
    'lo, hi = map(int, sys.argv[1].split("-"))',
    'family = socket.AF_INET6 if ":" in a else socket.AF_INET',
    'free = (p for p in random.sample(range(lo, hi + 1), hi + 1 - lo) if socket.socket(family).connect_ex((a, p)))',
    'p = next(free, 0) or sys.exit(f"dispatch notebook: no free port in {lo}-{hi} on {a}")',  # (refused: free)
    'shutil.which(sys.argv[2]) or sys.exit(f"dispatch notebook: {sys.argv[2]}: not found on the PATH of the job")',
    'os.execvp(sys.argv[2], sys.argv[2:] + [f"--ip={a}", f"--port={p}", "--port-retries=0"])',
))
#: The client's wait: how soon it says it waits for a GPU, how long each read of the log blocks.
WAIT_NOTE_S, READ_BLOCK_MS = 1.0, 500
#: What the client keeps of the log (the URL comes early) and shows of it when the job ends instead.
LOG_KEPT, TAIL_LINES = 64 * 1024, 15
#: A URL JupyterLab prints as it starts: `http://10.0.0.7:8890/lab?token=...`.
URL = re.compile(r"(https?)://(\[[0-9A-Fa-f:.]+\]|[^\s/:?\[\]]+):(\d{1,5})/")


class NotebookFailed(DispatcherError):
    """The job ended before JupyterLab said where it listens."""


@click.command(context_settings={"ignore_unknown_options": False})
@resources(priority="high", session=True)
@click.option("--python", "python", default=None, metavar="PATH",
              help="Run `PATH -m jupyterlab` (a venv's interpreter on the node); default: `jupyter lab` from the "
                   "node's PATH.")
@click.option("--port-range", default="8888-8999", metavar="LOW-HIGH",
              help="Ports JupyterLab may take on the node (one that is free).")
@click.option("--no-wait", is_flag=True, help="Print the job id and return; `--url JOB` prints the URL later.")
@click.option("--url", "url_of", default=None, metavar="JOB", help="Print the URL of a notebook job started before.")
@common
def notebook(ctx, python, port_range, no_wait, url_of, **flags):
    """JupyterLab as a job on a GPU node: dispatch notebook --gpus 1. Prints the URL to open once it runs
    (one line on stdout); stop it with dispatch cancel JOB."""
    from ..core.spec import spec_from_request
    from ..store.requests import submit_specs
    from .interactive import hangups_interrupt, hold_stops
    from .submit import warn_if_no_node_could_hold

    if url_of is not None:
        click.echo(url_now(ctx, url_of))
        return
    me = current_user()
    token, env = _new_token(ctx)
    here = caller_dir()
    request = session_request(flags, name=flags["name"] or "notebook", command=command_line(python, port_range, here),
                              env=[env])
    spec = spec_from_request(request, user=me, submit_ms=now_ms(), cwd=here)
    if not no_wait:
        hold_stops()  # a Ctrl-C from here on cancels the job, once it has an id
    (job_id,) = submit_specs(ctx.client, ctx.ns, [spec], me)
    warn_if_no_node_could_hold(ctx, [spec], [job_id])
    if no_wait:
        click.echo(job_id)
        return
    try:
        with hangups_interrupt():  # Ctrl-C, a closed terminal or a kill before the URL: the job goes
            url, node = follow(ctx, job_id, token)
    except KeyboardInterrupt:
        _cancel(ctx, job_id)
        sys.exit(130)
    click.echo(url)
    sys.stdout.flush()
    click.echo(f"dispatch: JupyterLab runs as job {job_id} on {node}; stop it with: dispatch cancel {job_id}",
               err=True)


def _new_token(ctx) -> tuple[str, str]:
    """(JupyterLab's token, the job's env entry). Identity off, the token itself (one user reaches this
    server); on, a nonce from which only its owner and the agents derive it (auth.identity)."""
    from ..store.requests import identity_on, own_token

    if not identity_on(ctx.client, ctx.ns):
        token = secrets.token_hex(24)
        return token, f"JUPYTER_TOKEN={token}"
    nonce = secrets.token_hex(16)
    return notebook_token(own_token(), nonce), f"{NOTEBOOK_NONCE}={nonce}"


def command_line(python: str | None, port_range: str, root: str) -> list[str]:
    """The job's command: LAUNCHER under the job's python, then JupyterLab's own arguments."""
    m = re.fullmatch(r"\s*(\d{1,5})\s*-\s*(\d{1,5})\s*", port_range or "")
    if not m or not 1024 <= int(m[1]) <= int(m[2]) <= 65535:
        raise InvalidRequestError(f"--port-range: {port_range!r} is not LOW-HIGH within 1024-65535, e.g. 8888-8999",
                                  field="--port-range")
    lab = [python, "-m", "jupyterlab"] if python else ["jupyter", "lab"]
    return [python or "python3", "-c", LAUNCHER, f"{m[1]}-{m[2]}", *lab, "--no-browser", "--allow-root",
            f"--ServerApp.root_dir={root}"]


def find_url(log_text: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of the first URL JupyterLab printed in `log_text`; None before it has."""
    m = URL.search(log_text)
    return (m[1], m[2], int(m[3])) if m and 0 < int(m[3]) < 65536 else None


def lab_url(found: tuple[str, str, int], address: str, token: str) -> str:
    """The URL to open: at the node's advertised address (the printed host where the node gave none)."""
    scheme, host, port = found
    if address:
        host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{port}/lab?token={token}"


def follow(ctx, job_id: str, token: str) -> tuple[str, str]:
    """Until JupyterLab prints its URL: (the URL to open, the node). Raises NotebookFailed if the job ends."""
    from ..store import job_record
    from ..store.jobs import is_final, read_log
    from ..store.nodes import read_addresses

    after, text, note_at = "-", "", time.monotonic() + WAIT_NOTE_S
    while True:
        rec = job_record.read_fields(ctx.client, ctx.ns, job_id, (*job_record.OUTCOME, "node"))
        if not rec["state"]:
            raise JobNotFound(job_id)
        for after, chunk in read_log(ctx.client, ctx.ns, job_id, after, block_ms=READ_BLOCK_MS):
            text = (text + chunk.decode(errors="replace"))[-LOG_KEPT:]
        found = find_url(text)
        if is_final(rec["state"]):
            _failed(job_id, rec, text, started=found is not None)
        if found and rec["state"] == "running":
            return lab_url(found, read_addresses(ctx.client, ctx.ns, [rec["node"]])[rec["node"]], token), rec["node"]
        if note_at is not None and rec["state"] == "pending" and time.monotonic() > note_at:
            click.echo(f"waiting for a GPU: job {job_id} (dispatch why {job_id})", err=True)
            note_at = None


def url_now(ctx, job_id: str) -> str:
    """`--url JOB`: the URL of a notebook job that runs and has printed it."""
    from ..store import job_record
    from ..store.codec import decode_spec
    from ..store.jobs import read_log
    from ..store.nodes import read_addresses

    rec = job_record.read_fields(ctx.client, ctx.ns, job_id, ("spec", "node", *job_record.OUTCOME))
    if not rec["state"]:
        raise JobNotFound(job_id)
    spec = decode_spec(rec["spec"], key=f"job {job_id}")
    env = dict(spec.env)
    token = env.get("JUPYTER_TOKEN")
    if env.get(NOTEBOOK_NONCE):  # under identity: the owner's own token makes it
        from ..store.requests import own_token

        if spec.user != current_user():
            raise NotAllowed(f"job {job_id} is {spec.user}'s notebook: only its owner can open it")
        token = notebook_token(own_token(), env[NOTEBOOK_NONCE])
    if not token:
        raise InvalidRequestError(f"job {job_id} is no notebook (dispatch notebook)", field="--url")
    if rec["state"] != "running":
        raise InvalidStateError(job_id, rec["state"], "open")
    text = b"".join(chunk for _, chunk in read_log(ctx.client, ctx.ns, job_id)).decode(errors="replace")
    found = find_url(text)
    if found is None:
        raise InvalidRequestError(f"job {job_id} has not printed its URL yet; see dispatch logs {job_id}",
                                  field="--url")
    return lab_url(found, read_addresses(ctx.client, ctx.ns, [rec["node"]])[rec["node"]], token)


def _failed(job_id: str, rec: dict, text: str, *, started: bool) -> None:
    """The job ended: its reason and its log's last lines on stderr, then the one-line error (alone, for
    an interpreter that is not there: the log's one line says no more)."""
    if not started and rec["state"] == "failed" and (rec["reason"] or "").startswith("cannot start '/"):
        raise NotebookFailed(f"job {job_id} failed: {rec['reason']} on its node; give --python the path of a "
                             "Python that has jupyterlab there")
    click.echo(f"dispatch: job {job_id} {rec['state']}: {rec['reason'] or 'ended'}", err=True)
    for line in text.splitlines()[-TAIL_LINES:]:
        click.echo(f"  | {line}", err=True)
    if rec["state"] == "cancelled":
        raise NotebookFailed(f"job {job_id} was cancelled before JupyterLab {'was ready' if started else 'started'}")
    if started:
        raise NotebookFailed(f"JupyterLab in job {job_id} exited; see dispatch logs {job_id}")
    said = next((line for line in text.splitlines() if line.startswith("dispatch notebook: no free port")), None)
    if said is not None:  # (the launcher's own words; not jupyterlab missing)
        raise NotebookFailed(f"JupyterLab did not start in job {job_id}: {said[len('dispatch notebook: '):]}; "
                             "give --port-range a range with a free port on that node")
    raise NotebookFailed(f"JupyterLab did not start in job {job_id}: install jupyterlab in the job's environment "
                         "(pip install jupyterlab on the node's PATH, or --python PATH of a venv that has it)")


def _cancel(ctx, job_id: str) -> None:
    """Ctrl-C before the URL: the job goes (signed under identity), as `dispatch cancel` does."""
    from .select import act_each
    from ..store.jobs import cancel_job

    act_each(ctx, "cancel", [{"id": job_id}], lambda j: cancel_job(ctx.scripts, ctx.client, ctx.ns, j, now_ms()),
             lambda outcome, job: "cancelled" if outcome in ("cancelled", "requested") else f"already {outcome}")

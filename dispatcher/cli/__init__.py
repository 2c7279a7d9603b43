"""The `dispatch` command. Subcommands parse, call one library function, and format.

main() is where a command's errors become messages: a DispatcherError prints one
line and exits with its code, a lost Redis connection says whether the server is restarting
(a command Redis refuses says so, in one line); tracebacks appear only with --debug. (The
dashboard, the scheduler's answers to signed requests and the node agent's job channel say errors
in their own way.) No module of the CLI imports redis, rq, pynvml, rich or flask at its top: a command
imports what it needs when it runs (main() imports redis only to recognise its
errors), so `dispatch --help` and `dispatch submit` load no more than they use.

This module holds the group, main() and the helpers the subcommands share. The
subcommands live by area in cli/submit.py (submit alone: the command run most, kept
small; its request flags in cli/flags.py, shared with shell and notebook), cli/jobs.py (the
commands that look at or act on jobs; which jobs a command means, ids, ranges, arrays and
filters, in cli/select.py), cli/logs.py, cli/explain.py (why, eta, decisions), cli/pending.py (hold, release, update), cli/requeue.py, cli/interactive.py (shell,
attach), cli/notebook.py, cli/nodectl.py (nodes, drain, resume), cli/policy.py (the policy
group), cli/ops.py (top, the long-running parts), cli/login.py (login, the auth group) and
cli/lab.py (simulate, history, report, tune); the group imports only the module of the command
it runs (COMMANDS).
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import time

import click

from ..core import errors
from ..core.errors import DispatcherError


#: How long a command waits for the server of a `dispatch up` that is starting it.
RESTART_WAIT_S = 15.0
#: The key prefix when neither --namespace nor the server's record names one.
DEFAULT_NAMESPACE = "dispatch"


class Ctx:
    """Lazily connecting context shared by the subcommands."""

    def __init__(self, url: str | None, ns: str | None, debug: bool):
        from ..config import note_flag

        self._url_flag, self._ns_flag, self.debug = url, ns, debug
        self._client = None
        note_flag(url)

    @property
    def ns(self) -> str:
        """--namespace (DISPATCH_NAMESPACE), else that of the server the URL comes from (the login
        file's, or the running `dispatch up`'s), else "dispatch"."""
        if self._ns_flag:
            return self._ns_flag
        from ..config import default_namespace

        return default_namespace() or DEFAULT_NAMESPACE

    @property
    def url(self) -> str:
        from ..config import resolve_url

        return resolve_url(self._url_flag)

    @property
    def client(self):
        """Connected at first use. A server that `dispatch up` is still starting is waited for (up to
        RESTART_WAIT_S), so a command run right after `up` works; a restart is said at once."""
        if self._client is None:
            from ..config import restarting_error
            from ..store.connect import connect

            deadline = time.monotonic() + RESTART_WAIT_S
            while True:
                try:
                    self._client = connect(self.url)
                    break
                except errors.ServerRestarting as e:  # a restart is said at once; a first start waited for
                    if e.status != "starting" or time.monotonic() > deadline:
                        raise
                except errors.ConnectionError as e:  # server.json says running, the server not yet
                    pending = restarting_error() if e.transient else None
                    if getattr(pending, "status", None) != "starting" or time.monotonic() > deadline:
                        raise
                time.sleep(0.25)
        return self._client

    @property
    def scripts(self):
        from ..store.scripts import Scripts

        return Scripts(self.client, self.ns)


def common(fn):
    """--redis, --namespace and --debug on every command."""
    @click.option("--redis", "redis_url", envvar="DISPATCH_REDIS_URL", metavar="URL",
                  help="Redis URL (env DISPATCH_REDIS_URL; else the server a running `dispatch up` recorded; "
                       "no other default).")
    @click.option("--namespace", "ns", envvar="DISPATCH_NAMESPACE", default=None,
                  help="Key prefix, to run several clusters on one Redis (default: the one `dispatch up` or "
                       "`dispatch login` recorded, else dispatch).")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    @functools.wraps(fn)
    def wrapper(redis_url, ns, debug, **kwargs):
        if ns is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", ns):
            raise click.BadParameter("letters, digits and _.- only", param_hint="--namespace")
        ctx = Ctx(redis_url, ns, debug)
        click.get_current_context().meta["debug"] = debug
        return fn(ctx, **kwargs)
    return wrapper


def json_flag(fn):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def exit_words(code: int | None) -> str:
    """An exit code as the tables show it: its code, or, for a signal (-N), the shell's 128+N and the
    signal's name ('137 (SIGKILL)', as `dispatch wait` exits and `$?` says); '-' for none."""
    if code is None:
        return "-"
    if code >= 0:
        return str(code)
    return f"{errors.exit_status(code)} ({errors.signal_name(-code)})"


def _table(rows: list[list[str]], header: list[str]) -> str:
    from .columns import table

    return table(rows, header)


def _setup_logging(debug: bool) -> None:
    import logging

    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


#: Every subcommand, by name: "module:attribute". Command modules import their helpers from this
#: one, and this one imports a command module only when that command is asked for.
COMMANDS = {
    "submit": "dispatcher.cli.submit:submit",
    "shell": "dispatcher.cli.interactive:shell", "attach": "dispatcher.cli.interactive:attach",
    "notebook": "dispatcher.cli.notebook:notebook",
    "queue": "dispatcher.cli.jobs:queue", "show": "dispatcher.cli.jobs:show", "cancel": "dispatcher.cli.jobs:cancel",
    "preempt": "dispatcher.cli.jobs:preempt", "checkpointed": "dispatcher.cli.jobs:checkpointed",
    "progress": "dispatcher.cli.jobs:progress",
    "hold": "dispatcher.cli.pending:hold", "release": "dispatcher.cli.pending:release",
    "update": "dispatcher.cli.pending:update", "requeue": "dispatcher.cli.requeue:requeue",
    "logs": "dispatcher.cli.logs:logs", "wait": "dispatcher.cli.jobs:wait", "nodes": "dispatcher.cli.nodectl:nodes",
    "drain": "dispatcher.cli.nodectl:drain", "resume": "dispatcher.cli.nodectl:resume",
    "why": "dispatcher.cli.explain:why", "eta": "dispatcher.cli.explain:eta", "decisions": "dispatcher.cli.explain:decisions",
    "policy": "dispatcher.cli.policy:policy", "top": "dispatcher.cli.ops:top", "scheduler": "dispatcher.cli.ops:scheduler",
    "worker": "dispatcher.cli.ops:worker", "dashboard": "dispatcher.cli.ops:dashboard", "up": "dispatcher.cli.ops:up",
    "down": "dispatcher.cli.down:down",
    "auth": "dispatcher.cli.login:auth", "login": "dispatcher.cli.login:login",
    "simulate": "dispatcher.cli.lab:simulate", "history": "dispatcher.cli.lab:history",
    "report": "dispatcher.cli.lab:report", "tune": "dispatcher.cli.lab:tune",
    "quarantine": "dispatcher.cli.quarantine:quarantine",
}


class LazyGroup(click.Group):
    """A group whose subcommands are defined in other modules, imported on first use."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx):
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, _, attr = self.lazy_commands[cmd_name].partition(":")
            self.add_command(_with_debug(getattr(importlib.import_module(module), attr)), cmd_name)
        return super().get_command(ctx, cmd_name)


def _with_debug(cmd: click.Command) -> click.Command:
    """`cmd` (and a group's subcommands) taking --debug, as the internal-error line asks: those without
    `common` get a flag of no value of its own (main() reads it from the command line)."""
    for sub in getattr(cmd, "commands", {}).values():
        _with_debug(sub)
    if not any("--debug" in p.opts for p in cmd.params):
        cmd.params.append(click.Option(["--debug"], is_flag=True, expose_value=False, help="Show tracebacks."))
    return cmd


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dispatch-gpu", prog_name="dispatch")
def cli():
    """dispatch: whose turn is it on the GPUs? Submit jobs; a scoring scheduler places them on GPU nodes."""


def _restarting():
    """A lost connection to the server of a `dispatch up` that still runs: it is restarting it, or the
    server hangs (config.restarting_error). To the server of a login: its owner's `dispatch up --shared`
    is not running (or moved)."""
    from ..config import restarting_error, url_source

    if url_source() == "login":
        from ..auth.login import LoginGone

        return LoginGone()
    return restarting_error()


def main() -> None:
    debug = "--debug" in sys.argv
    try:
        rv = cli.main(standalone_mode=False, prog_name="dispatch")
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as e:
        # `dispatch`, `dispatch policy`, `dispatch auth` alone: the help, as --help prints it (stdout, no
        # "error:"), but exit 2 as click's own standalone mode does (git exits 1): nothing was done, so a
        # script that ran a group with no subcommand does not read it as success.
        click.echo(e.ctx.get_help())
        sys.exit(errors.EXIT_USAGE)
    except click.ClickException as e:  # one line, as every other error: no usage block
        where = getattr(getattr(e, "ctx", None), "command_path", None) if isinstance(e, click.UsageError) else None
        hint = f" (see `{where} --help`)" if where else ""
        message = e.format_message()
        if isinstance(e, click.NoSuchOption) and where == "dispatch submit":  # (sbatch's flags)
            from .flags import slurm_hint

            slurm = slurm_hint(e.option_name)
            message = f"No such option: {e.option_name}: {slurm}" if slurm else message
        click.echo(f"dispatch: error: {message}{hint}", err=True)
        sys.exit(e.exit_code)
    except DispatcherError as e:
        if debug:  # the traceback, then the line and the exit status as without --debug (2 stays 2)
            import traceback

            traceback.print_exc()
        if isinstance(e, errors.NoServer):
            from .down import up_without_record

            e = up_without_record(e)
        if isinstance(e, errors.ConnectionError):  # (a server that cannot write answers: no restart to wait for)
            from ..store.connect import cannot_write

            e = cannot_write(e) or _restarting() or e
        click.echo(f"dispatch: error: {e}", err=True)
        sys.exit(e.exit_code)
    except Exception as e:
        if debug:
            raise
        import redis

        if isinstance(e, redis.exceptions.NoPermissionError):
            click.echo(f"dispatch: error: your Redis login may not do this ({e}); with identity on, users "
                       "change jobs only through signed requests (docs/security.md, Roles)", err=True)
            sys.exit(errors.EXIT_USAGE)
        from ..store.connect import cannot_write, transient

        if isinstance(e, redis.exceptions.ResponseError) and (full := cannot_write(e)) is not None:
            click.echo(f"dispatch: error: {full}", err=True)  # it answers: no restart to wait for
            sys.exit(full.exit_code)
        # a lost connection, or a server loading, full or read-only: maybe `up` restarting it; not a refused command
        if isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)) or transient(e):
            msg = _restarting() or f"Redis failed: {e} (is the server up? see `dispatch up`)"
            click.echo(f"dispatch: error: {msg}", err=True)
            sys.exit(errors.EXIT_CONNECT)
        if isinstance(e, redis.exceptions.RedisError):  # the server answered: it refused this command
            click.echo(f"dispatch: error: Redis refused the command: {e} (rerun with --debug for details)",
                       err=True)
            sys.exit(errors.EXIT_FAILED)
        click.echo(f"dispatch: internal error: {type(e).__name__}: {e} (rerun with --debug for details)",
                   err=True)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else errors.EXIT_OK)

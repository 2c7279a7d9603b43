"""What a job leaves behind besides its log stream: its output file (`submit --output`, Slurm's) and the
notification of its end (`submit --notify`, task-spooler's TS_ONFINISH, Slurm's --mail-type=END).

`--output PATTERN` names a file on the job's node that its output (stdout and stderr together) is
appended to as it runs: `%j` the job's id, `%A` its array's id (the job's own outside an array), `%a`
its index in the array (empty outside one), `%u` its user, `%x` its name (the command's first word
when it has none), `%n` and `%N` the node (Slurm's %N), `%r` a gang's rank (0 for a one-node job), `%%` a `%`. A relative
pattern is relative to the job's working directory.

`--notify CMD|URL`: an `http://` or `https://` URL gets a JSON POST of the job's end (end_body); anything
else is a command line (split as a shell would, run without one) given the end as DISPATCH_* variables
(end_env).

Pure: the patterns are checked and expanded here; who writes and who notifies is in workers/ and
dispatcher/notify.py.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

from .errors import InvalidRequestError
from .model import JobSpec

#: The letters a pattern may use after `%`.
LETTERS = "jaAuxnNr%"
MAX_PATTERN = 1024
MAX_NOTIFY = 4096
_ESCAPE = re.compile(r"%(.?)", re.S)


def parse_output(text) -> str:
    """A --output pattern, checked (every `%` is followed by one of LETTERS); "" for none."""
    pattern = "" if text is None else str(text)
    if not pattern:
        return ""
    if len(pattern) > MAX_PATTERN or "\0" in pattern or pattern.endswith("/"):
        raise InvalidRequestError(f"--output: {pattern[:80]!r} is not a file pattern (at most {MAX_PATTERN} "
                                  f"characters, not a directory)", field="--output")
    for letter in _ESCAPE.findall(pattern):
        if not letter or letter not in LETTERS:
            what = f"%{letter}" if letter else "a % at the end"
            raise InvalidRequestError(f"--output {pattern}: {what} is not one of %j %a %A %u %x %n %N %r %% "
                                      f"(%% for a literal %)", field="--output")
    return pattern


def expand(pattern: str, spec: JobSpec, job_id: str, node: str, rank: int = 0) -> str:
    """The pattern with its letters filled in for this job on `node` (its rank), relative to the job's cwd."""
    values = {"j": job_id, "A": spec.array_of or job_id, "a": "" if spec.array_index is None else str(spec.array_index),
              "u": spec.user, "x": spec.name or (spec.command[0].rpartition("/")[2] if spec.command else ""),
              "n": node, "N": node, "r": str(rank), "%": "%"}
    path = _ESCAPE.sub(lambda m: values[m.group(1)], pattern)
    if not path.startswith("/") and spec.cwd:
        path = f"{spec.cwd.rstrip('/')}/{path}"
    return path


def output_path(spec: JobSpec | None, job_id: str, node: str, rank: int = 0) -> str | None:
    """Where the job's --output goes on `node`; None with no --output (or no node yet)."""
    if spec is None or not spec.output or not node:
        return None
    return expand(spec.output, spec, job_id, node, rank)


def parse_notify(text) -> str:
    """A --notify value, checked: an http(s) URL, or a command line; "" for none."""
    value = "" if text is None else str(text).strip()
    if not value:
        return ""
    if len(value) > MAX_NOTIFY:
        raise InvalidRequestError(f"--notify: at most {MAX_NOTIFY} characters", field="--notify")
    if "\0" in value:
        raise InvalidRequestError("--notify: it holds a NUL byte, which no command line or URL can carry",
                                  field="--notify")
    if is_url(value):
        try:
            ok = bool(urlsplit(value).hostname)
        except ValueError:
            ok = False
        if not ok:
            raise InvalidRequestError(f"--notify {value}: not a URL with a host, e.g. https://hooks.example/x",
                                      field="--notify")
        return value
    try:
        if shlex.split(value):
            return value
    except ValueError as e:
        raise InvalidRequestError(f"--notify: {value!r} is not a command line ({e})", field="--notify") from None
    raise InvalidRequestError("--notify: give a command or an http(s) URL", field="--notify")


def is_url(notify: str) -> bool:
    return notify.startswith(("http://", "https://"))


def notify_argv(notify: str) -> list[str]:
    """The command a --notify that is no URL runs (no shell in between: its own `sh -c` if it wants one)."""
    return shlex.split(notify)


def end_body(job_id: str, state: str, exit_code, reason: str, name: str) -> dict:
    """What a URL is sent (as JSON) when the job ends: its exit code (-N for signal N), with the shell's
    status (128 + N) and the signal's name beside it (errors.exit_fields)."""
    from .errors import exit_fields

    return {"job_id": job_id, "state": state, "exit_code": exit_code, **exit_fields(exit_code),
            "reason": reason or "", "name": name}


def end_env(body: dict) -> dict:
    """The same for a command, as its environment's DISPATCH_* variables ("" for none)."""
    def word(v):
        return "" if v is None else str(v)
    return {"DISPATCH_JOB_ID": body["job_id"], "DISPATCH_JOB_STATE": body["state"],
            "DISPATCH_EXIT_CODE": word(body["exit_code"]), "DISPATCH_EXIT_STATUS": word(body.get("exit_status")),
            "DISPATCH_SIGNAL": word(body.get("signal")), "DISPATCH_REASON": body["reason"],
            "DISPATCH_JOB_NAME": body["name"]}

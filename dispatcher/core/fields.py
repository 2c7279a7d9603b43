"""Checks of single request fields that core/spec.py composes into a JobSpec: text that must be UTF-8,
the environment (--env), the jobs a job waits for (--after, --after-any), and the caller's defaults (its
user, and its working directory, which a relative --cwd is taken from, as Slurm's --chdir is from the
submit directory). Pure: the caller passes its user and directory (auth/identity.py's current_user and
caller_dir)."""

from __future__ import annotations

import posixpath
import re

from .errors import InvalidRequestError

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")

MAX_ENV = 256
#: What dispatch sets in every attempt's environment (workers/jobenv.attempt_env), over any --env: one
#: given was silently overridden (the job saw its own CUDA_VISIBLE_DEVICES, not the user's).
SET_BY_DISPATCH = frozenset({
    "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "DISPATCH_JOB_ID", "DISPATCH_EPOCH", "DISPATCH_NODE",
    "DISPATCH_NODE_ADDRESS", "DISPATCH_AGENT", "DISPATCH_GPUS", "DISPATCH_ATTEMPT", "DISPATCH_CHECKPOINT_DIR",
    "DISPATCH_RESUME", "DISPATCH_NAMESPACE", "DISPATCH_USER", "DISPATCH_JOB_SOCKET", "DISPATCH_JOB_CAP",
    "DISPATCH_ARRAY_INDEX", "DISPATCH_ARRAY_ID", "DISPATCH_ARRAY_COUNT"})
#: The most jobs one job may wait for.
MAX_DEPENDENCIES = 64


def utf8(value: str, flag: str) -> str:
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError(f"{flag}: {value!r} is not valid UTF-8", field=flag) from None
    return value


def parse_env(pairs: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise InvalidRequestError(f"--env: {pair!r} is not KEY=VALUE", field="--env")
        if "\0" in value:
            raise InvalidRequestError(f"--env: the value of {key} holds a NUL byte, which no environment can carry",
                                      field="--env")
        if key in SET_BY_DISPATCH:
            hint = " (ask for GPUs with --gpus and --gpu-type)" if key.startswith("CUDA_") else ""
            raise InvalidRequestError(f"--env: dispatch sets {key} for every job, over any given{hint}; leave it "
                                      "out", field="--env")
        out.append((key, value))
    if len(out) > MAX_ENV:
        raise InvalidRequestError(f"--env: at most {MAX_ENV} variables", field="--env")
    return tuple(out)


def env_pairs(env) -> tuple[tuple[str, str], ...]:
    """--env as given (KEY=VALUE strings, (key, value) pairs, or a dict) -> checked (key, value) pairs."""
    if not env:
        return ()
    if isinstance(env, dict):
        env = [f"{k}={v}" for k, v in env.items()]
    if isinstance(env, (str, bytes)) or not isinstance(env, (list, tuple)):
        raise InvalidRequestError("--env: expected KEY=VALUE strings", field="--env")
    pairs = []
    for item in env:
        if isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item):
            item = f"{item[0]}={item[1]}"
        if not isinstance(item, str):
            raise InvalidRequestError(f"--env: {item!r} is not KEY=VALUE", field="--env")
        pairs.append(utf8(item, "--env"))
    return parse_env(pairs)


def parse_job_ids(value, flag: str) -> tuple[str, ...]:
    """'12,13' or ['12', 13] -> ('12', '13'): the jobs a job waits for (--after, --after-any). An array's
    elements as queue shows them and cancel takes them, 12_[0-1], are spelled out (12_0, 12_1)."""
    from .selection import expand_ids, pieces

    if value in (None, "", ()):
        return ()
    items = pieces(value) if isinstance(value, str) else value
    if isinstance(items, (bytes, dict)) or not isinstance(items, (list, tuple)):
        raise InvalidRequestError(f"{flag}: expected job ids, e.g. 12,13", field=flag)
    ids = []
    for item in items:
        job_id = str(item).strip() if isinstance(item, (str, int)) and not isinstance(item, bool) else ""
        for one in expand_ids([job_id]) if "[" in job_id else [job_id]:
            if not one or not _JOB_ID.fullmatch(one):
                slurm = " (Slurm's afterok:ID is --after ID, afterany:ID --after-any ID)" \
                    if one.lower().startswith("after") else ""
                raise InvalidRequestError(f"{flag}: {item!r} is not a job id{slurm}", field=flag)
            if one not in ids:
                ids.append(one)
    if len(ids) > MAX_DEPENDENCIES:  # (a whole array: its id alone names every element, 12 for 12_[0-99])
        raise InvalidRequestError(f"{flag}: {len(ids)} job ids given, at most {MAX_DEPENDENCIES} (an array's id "
                                  "alone waits for every element of it)", field=flag)
    return tuple(ids)


def parse_dependency(text: str) -> dict[str, list[str]]:
    """Slurm's --dependency (-d) as submit's own flags: 'afterok:12:13,afterany:14' -> {"after": ["12",
    "13"], "after_any": ["14"]}. Only the kinds dispatch has: afterok (--after) and afterany (--after-any),
    all of them needed (',')."""
    out: dict[str, list[str]] = {"after": [], "after_any": []}
    if "?" in str(text):
        raise InvalidRequestError("--dependency: dispatch waits for every dependency (','), not for any one ('?')",
                                  field="--dependency")
    for part in str(text).split(","):
        kind, _, ids = part.strip().partition(":")
        flag = {"afterok": "after", "afterany": "after_any"}.get(kind.lower())
        if flag is None or not ids:
            raise InvalidRequestError(f"--dependency: {part.strip()!r} is not afterok:ID[:ID...] or "
                                      "afterany:ID[:ID...] (the kinds dispatch has: --after, --after-any)",
                                      field="--dependency")
        out[flag] += ids.split(":")
    return out


#: Text fields where an empty value is a mistake (`--team "$TEAM"` with TEAM unset), not a choice: flag, what to give.
NOT_EMPTY = {"name": ("--name", "a name"), "team": ("--team", "a team"),
             "checkpoint_signal": ("--checkpoint-signal", "a signal such as USR1"),
             "output": ("--output", "a file pattern such as logs/%x-%j.out"),
             "notify": ("--notify", "a command or an http(s) URL"),
             "scaling": ("--scaling", "linear, amdahl:P or a table such as 1:10h,2:5.5h")}


def refuse_empty(request: dict) -> None:
    """A request (REQUEST_FIELDS) that gives one of NOT_EMPTY empty or blank is refused: leaving the flag out
    is how to get its default."""
    for key, (flag, what) in NOT_EMPTY.items():
        value = request.get(key)
        if isinstance(value, str) and not value.strip():
            raise InvalidRequestError(f"{flag}: empty; give {what}, or leave {flag} out", field=flag)


def with_caller(options: dict, user: str, cwd: str) -> dict:
    """`options` (check_options' keywords) with the caller's user and working directory where the request
    gives none (absent or None). A relative --cwd is taken from the caller's directory (Slurm's --chdir),
    so the job runs there and not in whatever directory its node agent was started in. An empty --user or
    --cwd is refused: leaving the flag out is how to get the default. With no caller's directory (`cwd` '':
    auth/identity.caller_dir's, deleted under it), the request must give an absolute --cwd."""
    if options.get("user") is None:
        options["user"] = user
    elif isinstance(options["user"], str) and not options["user"].strip():
        raise InvalidRequestError("--user: empty; give a user name (left out, it is yours)", field="--user")
    given = options.get("cwd")
    if not cwd and (given is None or (isinstance(given, str) and given.strip() and not posixpath.isabs(given))):
        raise InvalidRequestError("--cwd: the directory you submit from no longer exists; cd to one that does, "
                                  "or give the job's directory as an absolute --cwd", field="--cwd")
    if given is None:
        options["cwd"] = cwd
    elif not isinstance(given, str):
        raise InvalidRequestError(f"--cwd: {given!r} is not a directory", field="--cwd")
    elif not given.strip():
        raise InvalidRequestError("--cwd: empty; give a directory (left out, it is the one you submit from)",
                                  field="--cwd")
    elif "\0" in given:
        raise InvalidRequestError(f"--cwd: {given!r} holds a NUL byte, which no path can carry", field="--cwd")
    elif not posixpath.isabs(given) and cwd:
        options["cwd"] = posixpath.normpath(posixpath.join(cwd, given))
    return options

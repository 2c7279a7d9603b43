"""A job's command: a list of text arguments, checked at the edge (submit's flags, a --from line, the
Python API). Pure."""

from __future__ import annotations

import json
import math

from .errors import InvalidRequestError
from .fields import utf8

MAX_COMMAND_BYTES = 64 * 1024


def checked_command(command) -> tuple[str, ...]:
    """The command as a tuple of text; raises InvalidRequestError for a string (not a list), no program,
    an argument that is neither text nor a number nor a path, text that is not UTF-8, or one past
    MAX_COMMAND_BYTES."""
    if isinstance(command, (str, bytes)) or not isinstance(command, (list, tuple, type(None))):
        raise InvalidRequestError("the command must be a list of arguments, e.g. ['python', 'train.py']",
                                  field="COMMAND")
    command = tuple(a if type(a) is str else _argument(a) for a in (command or ()))
    if not command or not command[0].strip():
        raise InvalidRequestError("no command given; put it after --, e.g. dispatch submit -- python train.py"
                                  if not command else f"the program to run is {command[0]!r}; name one, e.g. "
                                  "dispatch submit -- python train.py", field="COMMAND")
    try:
        size = len("\0".join(command).encode()) - len(command) + 1  # one encode for all the arguments
    except UnicodeEncodeError:
        for arg in command:
            utf8(arg, "COMMAND")  # names the argument that is not UTF-8
        raise
    if size > MAX_COMMAND_BYTES:
        raise InvalidRequestError(f"the command is longer than {MAX_COMMAND_BYTES} bytes", field="COMMAND")
    if "\0" in "".join(command):
        bad = next(a for a in command if "\0" in a)
        raise InvalidRequestError(f"the command's argument {bad!r} holds a NUL byte, which no command line can carry",
                                  field="COMMAND")
    return command


def _argument(a) -> str:
    """A command's argument that is not text: a number or a path as its text; anything else (a JSON
    object, list, null or true in a --from line) is refused, not run as Python's repr of it."""
    if isinstance(a, int) and not isinstance(a, bool) or isinstance(a, float) and math.isfinite(a):
        return str(a)
    if hasattr(a, "__fspath__"):
        return str(a.__fspath__())
    try:
        shown = json.dumps(a)[:80]  # (as the --from line wrote it: null, true, {"a": 1})
    except (TypeError, ValueError):
        shown = type(a).__name__
    raise InvalidRequestError(f"the command's arguments must be text or numbers, got {shown}", field="COMMAND")

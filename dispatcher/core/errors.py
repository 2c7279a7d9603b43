"""The one exception tree: DispatcherError, its exit codes, and the errors several layers share.
A few more subclasses live beside the code that raises them (auth.identity.NotAllowed,
auth.login.LoginGone, store.requests.Replayed, cli.jobside.ChannelError).

Every error carries the structured fields a caller needs (job_id, field, key, ...) and says
itself in one line (`str(e)`, its hint included); tests assert on type and fields, not on text.
They become messages for people where they reach them: the CLI (cli.main: one line and the exit
code), the dashboard (a JSON error with an HTTP status), the scheduler's answers to signed
requests (store/requests.py), the node agent's job channel (workers/jobchannel.py) and the logs
of the long-running parts (`dispatch up`, the scheduler's policy reload).
"""

#: Exit codes of the `dispatch` command.
EXIT_OK = 0
EXIT_FAILED = 1  # e.g. `dispatch wait` on a job that did not succeed
EXIT_USAGE = 2
EXIT_CONNECT = 3
EXIT_NOT_FOUND = 4
EXIT_TIMEOUT = 5
EXIT_NO_GPU = 6


def exit_status(code: int) -> int:
    """A process's exit as a shell reports it: its code, or 128 + the signal that killed it (-N)."""
    return code if code >= 0 else 128 - code


#: Linux's signal numbers (where agents run jobs), as the signal module has them; the policy core
#: imports no OS module.
_SIGNALS = ("HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2", "PIPE",
            "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ",
            "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS")


#: glibc's real-time signals, named as `kill -l` names them: SIGRTMIN (34) to SIGRTMAX (64).
_RTMIN, _RTMAX = 34, 64


def signal_name(number: int) -> str:
    """'SIGKILL' for 9, 'SIGRTMIN+6' for 40; 'signal 77' for a number no signal has."""
    if 0 < number <= len(_SIGNALS):
        return f"SIG{_SIGNALS[number - 1]}"
    if _RTMIN <= number <= _RTMAX:
        up, down = number - _RTMIN, _RTMAX - number
        return "SIGRTMIN" + (f"+{up}" if up else "") if up <= down + 1 else "SIGRTMAX" + (f"-{down}" if down else "")
    return f"signal {number}"


def exit_fields(code: int | None) -> dict:
    """A job's exit code (-N: killed by signal N, as Python's subprocess has it) as machine-read outputs
    give it beside the code: the shell's status (128 + N, as `dispatch wait` exits) and the signal's name."""
    if code is None:
        return {"exit_status": None, "signal": None}
    return {"exit_status": exit_status(code), "signal": signal_name(-code) if code < 0 else None}


class DispatcherError(Exception):
    """Root of every error dispatch raises on purpose."""

    exit_code = EXIT_FAILED
    hint = ""

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{msg} ({self.hint})" if self.hint else msg


class ConfigError(DispatcherError):
    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, key: str = ""):
        super().__init__(message)
        self.key = key


class InvalidRequestError(DispatcherError):
    """A user's request is malformed. `field` names the flag or field."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.field = field


class NotFoundError(DispatcherError):
    exit_code = EXIT_NOT_FOUND


class JobNotFound(NotFoundError):
    def __init__(self, job_id: str):
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id
        self.hint = "see `dispatch queue` for the jobs that exist"


class InvalidStateError(DispatcherError):
    """The job is in a state that does not allow the operation."""

    #: What to do instead, for the mistakes users make most: (operation, state) -> hint.
    HINTS = {("requeue", "running"): "`dispatch preempt --force` stops it and puts it back in the queue",
             ("update", "running"): "a running job's --time can be changed, the rest only while it is pending",
             ("hold", "running"): "only a pending job can be held; `dispatch preempt` sends it back to the queue"}

    def __init__(self, job_id: str, state: str, operation: str, hint: str | None = None):
        hint = hint or self.HINTS.get((operation, state))
        super().__init__(f"job {job_id} is {state}; cannot {operation} it" + (f" ({hint})" if hint else ""))
        self.job_id, self.state, self.operation = job_id, state, operation


class ConnectionError(DispatcherError):  # noqa: A001 - ours, not the builtin
    exit_code = EXIT_CONNECT

    def __init__(self, url: str, cause: str, *, transient: bool = False, hint: str | None = None):
        self.transient = transient  # the server is away or refusing writes for now, not misconfigured
        url = masked_url(url)  # never echo a password into a terminal or a log
        super().__init__(f"cannot reach Redis at {url}: {cause}")
        self.url = url
        self.hint = hint or ("start one with `dispatch up`, or point to yours with --redis URL "
                             "or DISPATCH_REDIS_URL")


class NoGpuError(DispatcherError):
    """NVML is not usable on this machine."""

    exit_code = EXIT_NO_GPU

    def __init__(self, cause: str):
        super().__init__(f"cannot read GPUs through NVML: {cause}")
        self.hint = "on a machine without NVIDIA GPUs, pass --fake-gpus, e.g. --fake-gpus 2xA100-40GB"


class MalformedRecord(DispatcherError):
    """A record in Redis that does not decode to what its schema says."""

    def __init__(self, key: str, cause: str):
        super().__init__(f"malformed record {key}: {cause}")
        self.key = key


class NoServer(DispatcherError):
    """No Redis URL from --redis, DISPATCH_REDIS_URL or a running `dispatch up` (no silent default)."""

    exit_code = EXIT_CONNECT

    def __init__(self, message: str = ""):
        super().__init__(message or "no server: start one with `dispatch up`, or pass --redis URL / set "
                                    "DISPATCH_REDIS_URL")


class ServerRestarting(DispatcherError):
    """The embedded server of a running `dispatch up` is not answering now (starting, restarting,
    stopping); `up` brings it back or stops."""

    exit_code = EXIT_CONNECT

    def __init__(self, up_pid: int, status: str):
        super().__init__(f"the embedded server of `dispatch up` (pid {up_pid}) is {status}; try again in a moment")
        self.up_pid, self.status = up_pid, status


class ServerNotAnswering(DispatcherError):
    """The embedded server of a running `dispatch up` runs but does not answer (hung, stopped, overloaded);
    `up` records no restart, and none is coming while its process lives."""

    exit_code = EXIT_CONNECT

    def __init__(self, up_pid: int, server_pid: int):
        super().__init__(f"the embedded server of `dispatch up` (pid {up_pid}) does not answer (timeout), though "
                         f"its process (pid {server_pid}) runs: it is hung, stopped or overloaded; see the log of "
                         f"`dispatch up` and that process (a stopped one: kill -CONT {server_pid}), or stop `up` "
                         "and start it again")
        self.up_pid, self.server_pid = up_pid, server_pid


class ServerCannotWrite(DispatcherError):
    """The server answers but refuses to write (MISCONF): it cannot write its append-only file, as on a
    full disk. No restart is coming: the disk needs room."""

    exit_code = EXIT_CONNECT

    def __init__(self, why: str):
        super().__init__(f"the server cannot write its data ({why}); make room on its disk (with `dispatch up`: "
                         "under $DISPATCH_HOME/data), then try again")


class UpAlreadyRunning(DispatcherError):
    """A second `dispatch up` on a state directory one already runs on."""

    def __init__(self, state_dir: str, pid: int | None, url: str | None):
        where = f"pid {pid}" if pid else "pid unknown"
        if url:  # (its password masked, whichever record it came from)
            where += f", server {masked_url(url)}"
        how = f"`dispatch down` (or kill {pid}, Ctrl-C in its terminal)" if pid else "Ctrl-C in its terminal"
        super().__init__(f"`dispatch up` already runs on state dir {state_dir} ({where}); stop it with {how}, "
                         "or give this one its own DISPATCH_HOME")
        self.state_dir, self.pid, self.url = state_dir, pid, url


class UpStopped(DispatcherError):
    """`dispatch up` stopped everything because a part of it cannot run (`part`: server, scheduler, agent)."""

    def __init__(self, part: str, reason: str):
        super().__init__(reason)
        self.part = part


def masked_url(url: str | None) -> str | None:
    """`url` with its password shown as ***: for logs, records and messages."""
    if not url:
        return url
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()
    return url

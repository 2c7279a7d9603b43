"""A job's output file (`submit --output`) and the telling of its end (`submit --notify`), on its node.

The output file: opened as the attempt's output copy starts (Supervisor._copy_output), appended to with
every chunk that also goes to the node-side log file and the log stream. For a job run as its user, the
agent (root) walks the path a directory at a time without following links, creates what is missing as
the user's, and writes only into a directory the user owns or anyone may write to, and only a file the
user owns: the same files the job itself could write. A file that cannot be opened or written does not
fail the job: one line in its log stream says why, and the output still goes to the stream.

The end: see dispatcher/notify.py for who tells it. Here the agent's share, in a thread of its own after
the end is recorded: a command runs as the job's user, in its working directory, for at most
notify.TIMEOUT_S, its output appended to the job's log stream; a URL is POSTed.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import threading

from dispatcher.clock import now_ms
from dispatcher.core.outputs import end_env, is_url, notify_argv, output_path
from dispatcher.notify import TIMEOUT_S, ended, failed, post
from dispatcher.store.connect import ride_out
from dispatcher.store.jobs import append_log
from dispatcher.store.job_record import claim_notify, set_log_path

from . import proctrack, unix_user

log = logging.getLogger("dispatch.agent")


def start(sup, run, log_path) -> object | None:
    """As the attempt's output copy starts: its node-side log file's path in the record (rank 0's), and
    its --output file opened (None: no --output, or it cannot be written, which its log says)."""
    if not run.rank:
        try:
            set_log_path(sup.client, sup.ns, run.job_id, str(log_path))
        except Exception as e:  # advisory: `dispatch show` lacks it
            log.warning("job %s: could not record its log file's path (%s)", run.job_id, e)
    path = output_path(run.spec, run.job_id, sup.node, run.rank or 0)
    if path is None:
        return None
    try:
        return os.fdopen(_open(path, run.owner), "ab", buffering=0)
    except OSError as e:
        _say(sup, run, f"cannot write --output {path} on {sup.node}: {e.strerror or e}; the output goes to "
                       f"`dispatch logs` only")
        return None


def write(sup, run, out, chunk: bytes, what: str = "--output"):
    """Append `chunk` to the output file (or the node-side log file, `what` names it); the file, or None
    once it cannot be written (said once): a full disk stops the copy, never the job's output."""
    try:
        out.write(chunk)
        return out
    except OSError as e:
        _say(sup, run, f"{what} stopped on {sup.node}: {e.strerror or e}")
        out.close()
        return None


def _say(sup, run, what: str) -> None:
    log.warning("job %s: %s", run.job_id, what)
    try:
        append_log(sup.client, sup.ns, run.job_id, f"[dispatch: {what}]\n".encode(), rank=run.rank or 0)
    except Exception:
        pass


def _open(path: str, owner: tuple[int, int] | None) -> int:
    """An fd of `path` opened to append, its directories created; as the job's `owner` would (module doc)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
    if owner is None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return os.open(path, flags | os.O_CREAT, 0o644)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or parts[-1] == "..":
        raise IsADirectoryError(21, "not a file")
    fd = os.open("/" if path.startswith("/") else ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            try:
                os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:  # created as theirs, where they could have created it
                _theirs(fd, owner)
                os.mkdir(name, 0o755, dir_fd=fd)
                os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
            fd, old = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd), fd
            os.close(old)
        _theirs(fd, owner)
        try:
            out = os.open(parts[-1], flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
            os.fchown(out, *owner)
        except FileExistsError:
            out = os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
            st = os.fstat(out)
            if st.st_uid != owner[0] or not stat.S_ISREG(st.st_mode):
                os.close(out)
                raise PermissionError(13, "the file exists and is not the job user's")
        return out
    finally:
        os.close(fd)


def _theirs(dir_fd: int, owner: tuple[int, int]) -> None:
    """The job's user may create files in this directory: it is theirs, or anyone's to write."""
    st = os.fstat(dir_fd)
    if st.st_uid != owner[0] and not st.st_mode & 0o002:
        raise PermissionError(13, "a directory on the way is not the job user's")


def tell_end(sup, job_id: str) -> None:
    """Tell the job's end to its --notify, if it has ended and nobody told it yet (in a thread: never in
    the way of what called it)."""
    threading.Thread(target=_tell, args=(sup, job_id), name=f"notify-{job_id}", daemon=True).start()


def _tell(sup, job_id: str) -> None:
    try:  # (through a server's restart: told once it is back)
        found = ride_out(lambda: ended(sup.client, sup.ns, job_id))
        if found is None or not ride_out(lambda: claim_notify(sup.client, sup.ns, job_id, f"{sup.node} {now_ms()}")):
            return
        spec, body = found
        if is_url(spec.notify):
            post(spec.notify, body)
        else:
            _run(sup, spec, body)
        log.info("job %s: its end (%s) told to its --notify", job_id, body["state"])
    except Exception as e:  # told at most once: logged, not retried
        log.warning("job %s: --notify failed: %s", job_id, e)
        failed(sup.client, sup.ns, job_id, e)


def _run(sup, spec, body: dict) -> None:
    """The command, as the job's user in its working directory; its output into the job's log stream."""
    env = {**sup.base_env, **dict(spec.env), **end_env(body)}
    identity = unix_user.popen_identity(spec.user, env, sup.allow_root_jobs) if sup.run_as_user else {}
    argv, cwd = notify_argv(spec.notify), spec.cwd if spec.cwd and os.path.isdir(spec.cwd) else None
    if identity and cwd:  # entered as its user, as the job's own is (proctrack.enter_cwd)
        argv, cwd = proctrack.enter_cwd(argv, cwd), "/"
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=TIMEOUT_S, start_new_session=True, **identity)
        said, code = done.stdout, f"exit code {done.returncode}"
    except subprocess.TimeoutExpired as e:
        said, code = e.output or b"", f"stopped after {TIMEOUT_S:.0f}s"
    append_log(sup.client, sup.ns, body["job_id"], said + f"[dispatch: --notify ran on {sup.node}: {code}]\n".encode())

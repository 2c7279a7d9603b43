"""Running a job as its submitting Unix user (Slurm's model: the agent is root, the job is not), and
what a node agent refuses so that no job runs as someone it is not."""

from __future__ import annotations

import errno
import os
import stat


def popen_identity(user: str, env: dict, allow_root: bool = False) -> dict:
    """Popen arguments that run a job as its submitting Unix user (Slurm's model: the agent is root,
    the job is not). Sets HOME/USER/LOGNAME. Raises LookupError for a user this node does not know,
    or for root (unless the agent was started with --allow-root-jobs)."""
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise LookupError(f"no Unix user {user!r}") from None
    if pw.pw_uid == 0 and not allow_root:
        raise LookupError("jobs are not run as root (the agent runs with --run-as-user; --allow-root-jobs "
                          "would allow it)")
    env.update({"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name})
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": os.getgrouplist(pw.pw_name, pw.pw_gid)}


def agent_user() -> str:
    """The name of the user this agent runs as (its uid if it has none)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def refuse_other_user(user: str) -> str | None:
    """A node agent that is not root, with identity on, runs only its own user's jobs: it cannot run
    another's as them, and running it as itself would let that user act as the agent's user. The
    reason to fail such a job with, or None."""
    mine = agent_user()
    if user == mine:
        return None
    return (f"its agent runs as {mine} and cannot run a job of {user} as {user}, nor as {mine} (start the agent "
            f"as root with --run-as-user)")


def cannot_enter(cwd: str, user: str, identity: dict) -> str | None:
    """Why `user` (identity: popen_identity's) cannot enter directory `cwd`, or None. Judged from the
    permission bits of every directory on the way, as the kernel judges the user's search right
    there; the job's own shell enters it again after dropping privileges (proctrack.enter_cwd), so
    this only gives the reason early and runs nothing."""
    uid, groups = identity["user"], {identity["group"], *(identity.get("extra_groups") or ())}
    path = os.path.realpath(cwd)
    parts = [p for p in path.split("/") if p]
    for n in range(len(parts) + 1):
        d = "/" + "/".join(parts[:n])
        try:
            st = os.stat(d)
        except OSError as e:
            return None if e.errno == errno.ENOENT else f"cannot enter working directory {cwd} as {user}: {e.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"cannot enter working directory {cwd} as {user}: {os.strerror(errno.ENOTDIR)}"
        if uid == 0:
            continue
        bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH
        if not st.st_mode & bit:
            return f"cannot enter working directory {cwd} as {user}: {os.strerror(errno.EACCES)}"
    return None

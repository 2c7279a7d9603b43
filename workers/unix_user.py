"""Running a job as its submitting Unix user (Slurm's model: the agent is root, the job is not)."""

from __future__ import annotations

import os
from pathlib import Path


def popen_identity(user: str, ckpt_dir: Path, env: dict) -> dict:
    """Popen arguments that run a job as its submitting Unix user (Slurm's model: the agent is root,
    the job is not). Sets HOME/USER/LOGNAME and hands the user its checkpoint directory. Raises
    LookupError for a user this node does not know, or for root."""
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise LookupError(f"no Unix user {user!r}") from None
    if pw.pw_uid == 0:
        raise LookupError("jobs are not run as root (the agent runs with --run-as-user)")
    os.chown(ckpt_dir, pw.pw_uid, pw.pw_gid)
    env.update({"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name})
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": os.getgrouplist(pw.pw_name, pw.pw_gid)}

"""What a job's process is given: its environment (no credential of the agent's in it) and the files
of its attempt on the node (its log, its checkpoint directory), owned by the job's user.

A job holds no Redis URL, password, token or lab secret: the agent's own environment is copied
without DISPATCH_REDIS_URL (and every DISPATCH_REDIS*), DISPATCH_TOKEN, DISPATCH_SECRET_FILE,
DISPATCH_KEEPER_URL, and without any variable whose value contains the Redis password or the lab
secret. What the job may ask of dispatch goes through the node agent's job channel
(workers/jobchannel.py), with the attempt's capability DISPATCH_JOB_CAP.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dispatcher.auth.identity import NOTEBOOK_NONCE, notebook_token, token_for
from dispatcher.core.model import JobSpec

#: The agent's variables that never reach a job, whatever their value.
CREDENTIAL_VARS = frozenset({"DISPATCH_REDIS_URL", "DISPATCH_TOKEN", "DISPATCH_SECRET_FILE", "DISPATCH_KEEPER_URL"})


def secrets_of(url: str, client=None, verifier=None) -> tuple[str, ...]:
    """The strings no job's environment may contain: the Redis password (as the URL spells it and
    decoded, and as the client holds it) and the lab secret."""
    out = set()
    try:
        password = urlsplit(url or "").password
    except ValueError:
        password = None
    if password:
        out |= {password, unquote(password)}
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None) or {}
    if kwargs.get("password"):
        out.add(str(kwargs["password"]))
    if verifier is not None:
        out.add(verifier.secret.decode(errors="replace"))
    return tuple(s for s in out if s)


def agent_env(secrets: tuple[str, ...], environ=None) -> dict:
    """The agent's environment less its credentials: what every job starts from."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if k not in CREDENTIAL_VARS and not k.startswith("DISPATCH_REDIS") and not any(s in v for s in secrets)}


def attempt_env(base: dict, spec: JobSpec, *, job_id: str, epoch: int, node: str, address: str, agent: str,
                ns: str, gpu_list: str, attempt: int, ckpt: Path, socket_path: str, cap: str,
                secret: bytes | None = None) -> dict:
    """The environment of one attempt: the agent's (credentials removed), the spec's, then dispatch's.
    `address`: the node's advertised address (its agent's --address), where a job's server is reached.
    `secret`: under identity, the lab secret, from which a notebook's token is derived (auth.identity)."""
    env = dict(base)
    env.update(dict(spec.env))
    for k in CREDENTIAL_VARS:  # not even from the spec: a job asks through its channel
        env.pop(k, None)
    env.update({
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA's indices = NVML's indices
        "CUDA_VISIBLE_DEVICES": gpu_list,
        "DISPATCH_JOB_ID": job_id,
        "DISPATCH_EPOCH": str(epoch),
        "DISPATCH_NODE": node,
        "DISPATCH_NODE_ADDRESS": address,  # (dispatch notebook binds JupyterLab there)
        "DISPATCH_AGENT": agent,  # which agent's job this is (workers/proctrack.Attempt.marks)
        "DISPATCH_GPUS": str(len([g for g in gpu_list.split(",") if g])),
        "DISPATCH_ATTEMPT": str(attempt),
        "DISPATCH_CHECKPOINT_DIR": str(ckpt),
        "DISPATCH_RESUME": "1" if attempt > 0 else "0",
        "DISPATCH_NAMESPACE": ns,
        "DISPATCH_USER": spec.user,  # whom `dispatch submit` inside the job submits as
        "DISPATCH_JOB_SOCKET": socket_path,
        "DISPATCH_JOB_CAP": cap,
    })
    nonce = env.get(NOTEBOOK_NONCE)
    if nonce and secret is not None:  # dispatch notebook under identity: its owner's token, made here
        env["JUPYTER_TOKEN"] = notebook_token(token_for(secret, spec.user), nonce)
    if spec.array_index is not None:  # an element of a job array (core/arrays.py)
        env.update({"DISPATCH_ARRAY_INDEX": str(spec.array_index), "DISPATCH_ARRAY_ID": spec.array_of,
                    "DISPATCH_ARRAY_COUNT": str(spec.array_count)})
    return env


def owner_of(identity: dict) -> tuple[int, int] | None:
    """(uid, gid) a job run as its user gets its files under; None: the agent's own."""
    return (identity["user"], identity["group"]) if identity else None


def private_dir(path: Path, owner: tuple[int, int] | None) -> None:
    """A job's checkpoint directory: created if need be, its user's, and no one else's (0700)."""
    path.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        os.chown(path, *owner)
    path.chmod(0o700)


def private_log(path: Path, owner: tuple[int, int] | None) -> None:
    """A job's node-side log file: created 0600 (and kept so) and owned by the job's user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)

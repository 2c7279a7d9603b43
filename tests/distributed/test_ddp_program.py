"""The DDP program the gang tests run (ddp_train.py), proved without dispatch: two torchrun "nodes"
on loopback (2 nodes x 2 ranks, gloo) end with the weights of one process over the same global
batches, and still do when one rank dies mid-run and the gang is rerun from its checkpoint.

What dispatch does for a gang is done here by hand: start the command once per node with
--node-rank, and when one node's run fails stop the other's (as its agent would)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the test extra pins a CPU build)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROGRAM = Path(__file__).with_name("ddp_train.py")
NODES, PER_NODE, STEPS = 2, 2, 40
FAIL_AT = 15


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    # gloo binds to the address its host name resolves to unless told; on loopback, name the interface
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def _gang(tmp: Path, tag: str, args: list[str], env: dict) -> list[tuple[subprocess.Popen, Path]]:
    """The program once per node, as dispatch runs a gang's command: torchrun with each node's rank."""
    port, out = _free_port(), []
    for rank in range(NODES):
        log = tmp / f"{tag}-node{rank}.log"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node",
               str(PER_NODE), "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
               str(PROGRAM)] + args
        with open(log, "wb") as f:
            out.append((subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=tmp,
                                         start_new_session=True), log))
    return out


def _wait_gang(gang, timeout: float = 150) -> list[int]:
    """Every node's exit code; once one node fails the others are killed (failure as a unit)."""
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p, _ in gang):
            failed = any(p.poll() not in (None, 0) for p, _ in gang)
            assert time.monotonic() < deadline, "the gang did not end in time\n" + _logs(gang)
            if failed:
                break
            time.sleep(0.1)
    finally:
        for p, _ in gang:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return [p.returncode for p, _ in gang]


def _logs(gang) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for _, log in gang)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference") / "reference.pt"
    p = subprocess.run([sys.executable, str(PROGRAM), "--reference", str(out), "--steps", str(STEPS)],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"step {STEPS} loss" in p.stdout
    return torch.load(out, weights_only=True)


def test_two_nodes_of_two_ranks_end_with_the_single_process_weights(tmp_path, reference):
    progress = tmp_path / "progress"
    gang = _gang(tmp_path, "run", ["--out", "final.pt", "--steps", str(STEPS)],
                 _env(DISPATCH_PROGRESS_FILE=str(progress)))
    assert _wait_gang(gang) == [0, 0], _logs(gang)
    final = torch.load(tmp_path / "final.pt", weights_only=True)
    assert _max_diff(final, reference) < 1e-12, _logs(gang)
    assert f"rank 3 step {STEPS} loss" in gang[1][1].read_text()  # the second node ran ranks 2 and 3
    steps = [int(line) for line in progress.read_text().split()]
    assert sorted(set(steps)) == list(range(1, STEPS + 1)) and len(steps) == NODES * STEPS  # local rank 0 of each


def test_a_rank_that_dies_mid_run_is_resumed_from_the_checkpoint_to_the_same_weights(tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    args = ["--out", "final.pt", "--steps", str(STEPS), "--fail-at-step", str(FAIL_AT)]
    first = _gang(tmp_path, "first", args, _env(DISPATCH_CHECKPOINT_DIR=str(ckpt)))
    codes = _wait_gang(first)
    assert codes[1] != 0 and f"rank 3 failing at step {FAIL_AT}" in first[1][1].read_text(), _logs(first)
    assert not (tmp_path / "final.pt").exists()
    saved = torch.load(ckpt / "ckpt.pt", weights_only=True)
    assert saved["step"] == FAIL_AT and (ckpt / "CHECKPOINTED").exists()  # the barrier: no rank ran ahead
    assert saved["optimizer"]["state"], "the momentum buffers are in the checkpoint"

    again = _gang(tmp_path, "again", args, _env(DISPATCH_CHECKPOINT_DIR=str(ckpt)))  # the same command, rerun
    assert _wait_gang(again) == [0, 0], _logs(again)
    for _, log in again:
        assert f"resumed at step {FAIL_AT}" in log.read_text(), _logs(again)
    assert f"step {FAIL_AT} loss" not in again[0][1].read_text()  # no step done twice
    final = torch.load(tmp_path / "final.pt", weights_only=True)
    assert _max_diff(final, reference) < 1e-12, _logs(again)
    assert torch.load(ckpt / "ckpt.pt", weights_only=True)["step"] == STEPS

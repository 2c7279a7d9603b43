"""A real torch.distributed data-parallel training run (CPU, gloo) whose result can be checked exactly.

A small float64 model (Linear(8,16)-Tanh-Linear(16,1)) with a seeded init is trained with SGD and
momentum for --steps steps. Step s uses a global batch of --batch samples drawn from a generator
seeded by (--seed, s), the same whatever the world size; each rank takes its equal slice by rank
index, so DistributedDataParallel's averaged gradient is the gradient of the whole global batch and
the final weights equal a single process's over the same batches (to rounding, well under 1e-12).

    python ddp_train.py --reference OUT [--steps 40]          one process, no torch.distributed
    torchrun --nnodes N --node-rank R --nproc-per-node P --master-addr A --master-port PORT \\
        ddp_train.py --out OUT [--steps 40] [--step-sleep S] [--fail-at-step K --fail-rank R]

Under torchrun it reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (torchrun's
environment) and joins a gloo process group. Rank 0 writes OUT (the final state_dict) at the end.

Checkpoints: with --ckpt-dir, else $DISPATCH_CHECKPOINT_DIR, rank 0 writes {step, model, optimizer}
to ckpt.pt there every --ckpt-every steps (a temporary file, then os.replace), then touches
CHECKPOINTED (dispatch's checkpoint report, workers/running.py), and every rank waits at a barrier,
so none runs ahead of a checkpoint. At start rank 0 reads ckpt.pt if it is there and sends it to
every rank, which resume from its step: only rank 0's host must see the directory, but rank 0 may
land on another host on a rerun, so across hosts it must be shared storage.

Progress: after each step, local rank 0 of every node (and the reference) appends the number of
steps done, one per line, to $DISPATCH_PROGRESS_FILE when it is set (dispatch's hang detection).
Every rank prints `rank R step S loss L` per step.

--fail-at-step K makes rank --fail-rank (default: the last) exit with code 3 before step K, but only
in a run that started before K: the rerun that resumes from the checkpoint goes on, as a real job's
second attempt would.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

CKPT_NAME = "ckpt.pt"
CHECKPOINT_FILE = "CHECKPOINTED"  # as workers/running.py (this program imports nothing of dispatch)
FAIL_EXIT = 3


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--reference", metavar="OUT", help="one process, no torch.distributed; save the weights to OUT")
    mode.add_argument("--out", metavar="OUT", help="under torchrun: rank 0 saves the final weights to OUT")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=32, help="global batch per step (split evenly across ranks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--step-sleep", type=float, default=0.0, metavar="S", help="sleep S seconds after each step")
    p.add_argument("--ckpt-dir", default=None, help="default: $DISPATCH_CHECKPOINT_DIR; neither: no checkpoints")
    p.add_argument("--ckpt-every", type=int, default=1, metavar="K")
    p.add_argument("--fail-at-step", type=int, default=None, metavar="K")
    p.add_argument("--fail-rank", type=int, default=None, help="the rank that fails (default: the last)")
    p.add_argument("--pg-timeout", type=float, default=120.0, help="gloo collective timeout, seconds")
    return p.parse_args(argv)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).double()


def global_batch(seed: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s whole batch: the same for every world size and every attempt."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(size, 8, generator=g, dtype=torch.float64)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(size, 1, generator=g, dtype=torch.float64)
    return x, y


def shard(x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    per = x.shape[0] // world
    return x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]


def save_atomic(obj, path: Path) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def report_progress(step: int) -> None:
    path = os.environ.get("DISPATCH_PROGRESS_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{step}\n")


def checkpoint(ckpt_dir: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Rank 0's checkpoint after `step` steps, then dispatch's checkpoint report."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    save_atomic({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, ckpt_dir / CKPT_NAME)
    mark = ckpt_dir / CHECKPOINT_FILE
    mark.touch()
    os.utime(mark)  # the agent reads its mtime


def load_checkpoint(ckpt_dir: Path | None):
    path = ckpt_dir / CKPT_NAME if ckpt_dir else None
    if path is None or not path.exists():
        return None
    return torch.load(path, weights_only=True)


def train(args, rank: int = 0, world: int = 1, local_rank: int = 0, ddp=None) -> nn.Module:
    """The training loop, for the reference (world 1, no ddp) and for every DDP rank."""
    import torch.distributed as dist

    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    where = args.ckpt_dir or os.environ.get("DISPATCH_CHECKPOINT_DIR")
    ckpt_dir = Path(where) if where else None
    state = [load_checkpoint(ckpt_dir) if rank == 0 else None]
    if ddp is not None:
        dist.broadcast_object_list(state, src=0)  # every rank resumes from rank 0's checkpoint
    start = 0
    if state[0] is not None:
        model.load_state_dict(state[0]["model"])
        opt.load_state_dict(state[0]["optimizer"])
        start = int(state[0]["step"])
        print(f"rank {rank} resumed at step {start} from {ckpt_dir / CKPT_NAME}", flush=True)
    net = ddp(model) if ddp is not None else model
    fail_rank = world - 1 if args.fail_rank is None else args.fail_rank
    for step in range(start, args.steps):
        if args.fail_at_step is not None and step == args.fail_at_step and start < step and rank == fail_rank:
            print(f"rank {rank} failing at step {step} (--fail-at-step)", flush=True)
            os._exit(FAIL_EXIT)
        x, y = shard(*global_batch(args.seed, step, args.batch), rank, world)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step + 1} loss {loss.item():.10f}", flush=True)
        if ckpt_dir is not None and (step + 1) % args.ckpt_every == 0:
            if rank == 0:
                checkpoint(ckpt_dir, step + 1, model, opt)
            if ddp is not None:
                dist.barrier()
        if local_rank == 0:
            report_progress(step + 1)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    return model


def run_distributed(args) -> int:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    missing = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        print(f"ddp_train: {', '.join(missing)} not set: run under torchrun, or give --reference", file=sys.stderr)
        return 2
    rank, world, local_rank = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if args.batch % world:
        print(f"ddp_train: --batch {args.batch} does not split evenly over {world} ranks", file=sys.stderr)
        return 2
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    try:
        model = train(args, rank, world, local_rank, ddp=DistributedDataParallel)
        if rank == 0:
            save_atomic(model.state_dict(), Path(args.out))
            print(f"rank 0 saved the final weights to {args.out}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.reference:
        model = train(args)
        save_atomic(model.state_dict(), Path(args.reference))
        return 0
    return run_distributed(args)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # past destroy_process_group, the interpreter's teardown can race gloo's own threads: a rank whose work
    # was done and saved aborted ("terminate called without an active exception", SIGABRT) on a loaded
    # machine, and torchrun failed the node; nothing is left to do, so the process ends here
    os._exit(code)

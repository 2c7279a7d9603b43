"""What `dispatch simulate` takes of its options: which each way of running reads (an option given that
the way does not read is an error, not silently dropped), --compare's names, --out's file, --ckpt-cost's two
durations."""

from __future__ import annotations

import json

import click

from ..core.errors import InvalidRequestError

#: What each way of running `simulate` reads; an option given that the way does not read is an error (not
#: silently dropped). --policy and --compare are checked apart: the one or the other.
TRACE_OPTIONS = {"trace", "gpus", "gpus_per_node", "nodes_spec", "policy", "compare", "est_error", "ckpt_cost",
                 "time_scale", "seed", "as_json", "plot", "out_json", "debug"}
SUITE_OPTIONS = {"suite", "policy", "compare", "est_error", "ckpt_cost", "seed", "as_json", "workloads", "traces_dir",
                 "out_json", "debug"}
EXPORT_OPTIONS = {"suite", "export_dir", "workloads", "traces_dir", "seed", "debug"}
CLUSTER_OPTIONS = {"gpus", "gpus_per_node", "nodes_spec"}
#: Each option's name on the command line, for the error that names it.
FLAGS = {"trace": "TRACE", "gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "nodes_spec": "--nodes",
         "policy": "--policy", "compare": "--compare", "est_error": "--est-error", "ckpt_cost": "--ckpt-cost",
         "time_scale": "--time-scale", "seed": "--seed", "as_json": "--json", "plot": "--plot", "suite": "--suite",
         "workloads": "--workloads", "traces_dir": "--traces", "out_json": "--out", "export_dir": "--export",
         "debug": "--debug"}
#: The longest checkpoint save or restore --ckpt-cost takes: a day.
MAX_CKPT_S = 86400.0


def check_options(ctx: click.Context, suite: bool, export_dir: str | None) -> None:
    """One line for an option this way of running does not read, or two that say the same thing."""
    from click.core import ParameterSource

    given = {name for name in ctx.params
             if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)}
    if suite and export_dir:
        allowed, why = EXPORT_OPTIONS, "does nothing with --export (it writes the weeks as traces and runs nothing)"
    elif suite:
        allowed, why = SUITE_OPTIONS, "does nothing with --suite"
    else:
        allowed, why = TRACE_OPTIONS, "needs --suite"
    extra = [name for name in FLAGS if name in given - allowed]
    if extra[:1] == ["trace"]:
        raise InvalidRequestError("give a TRACE or --suite, not both", field="TRACE")
    if extra:
        cluster = " (each week runs on its own cluster)" if suite and extra[0] in CLUSTER_OPTIONS else ""
        raise InvalidRequestError(f"{FLAGS[extra[0]]} {why}{cluster}", field=FLAGS[extra[0]])
    if {"policy", "compare"} <= given:
        raise InvalidRequestError("give --policy NAME or --compare NAME,NAME,..., not both: --compare runs only the "
                                  "policies it lists (add the --policy one to it)", field="--compare")
    if "nodes_spec" in given and ({"gpus", "gpus_per_node"} & given):
        flag = "--gpus" if "gpus" in given else "--gpus-per-node"
        raise InvalidRequestError(f"give the cluster as --gpus N [--gpus-per-node G] or as --nodes SPEC, not both "
                                  f"({flag} with --nodes)", field=flag)


def policy_names(policy: str, compare: str | None) -> list[str]:
    """The policies to run: --policy's one, or --compare's list; an empty or repeated name in the list is
    refused (',,' is a typo, and a name twice would silently run once)."""
    flag, text = ("--policy", policy) if compare is None else ("--compare", compare)
    names = [n.strip() for n in text.split(",")]
    if not any(names):  # --compare '' or ',', --policy ''
        raise InvalidRequestError(f"{flag}: no policy named; give e.g. {flag} "
                                  f"{'dispatch' if compare is None else 'fifo,dispatch'} (or leave it out)", field=flag)
    if compare is None:
        return [n for n in names if n]
    if "" in names:
        raise InvalidRequestError(f"--compare: {compare!r} has an empty name; give the policies with one comma "
                                  f"between each, e.g. fifo,dispatch", field="--compare")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise InvalidRequestError(f"--compare: {twice!r} is named twice; name each policy once", field="--compare")
    return names


def write_json(path: str | None, obj: dict) -> None:
    from pathlib import Path

    if not path:
        return
    try:
        Path(path).write_text(json.dumps(obj, indent=1) + "\n")
    except OSError as e:
        raise InvalidRequestError(f"--out: cannot write {path}: {e.strerror or e}", field="--out") from None


def parse_ckpt_cost(text: str) -> tuple[float, float]:
    """'30s,10s' -> (30.0, 10.0): the save and the restore, both given (one value alone is refused, not
    read as a save with no restore)."""
    from ..core.units import parse_duration

    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise InvalidRequestError(f"--ckpt-cost: {text!r} is not SAVE,RESTORE; give both durations, e.g. 30s,30s "
                                  f"(or {parts[0].strip() or '30s'},0 for no restore)", field="--ckpt-cost")
    save, restore = parts
    save_s = 0.0 if save.strip() in ("0", "0s") else parse_duration(save, flag="--ckpt-cost")
    restore_s = 0.0 if restore.strip() in ("0", "0s") else parse_duration(restore, flag="--ckpt-cost")
    if max(save_s, restore_s) > MAX_CKPT_S:
        raise InvalidRequestError(f"--ckpt-cost: {text!r}: a save or restore of more than 1d (86400 s)",
                                  field="--ckpt-cost")
    return save_s, restore_s

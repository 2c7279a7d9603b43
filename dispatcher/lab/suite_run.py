"""Running the workload suite (sim/suite.py): reading the shared traces, one process per core.

Every (workload, policy) pair is one simulation; they are independent, so they run in a
process pool. A policy is a built-in name or a policy file (.toml), read by each worker.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..sim.suite import BASELINES, TRACES, Workload, from_trace, generated

#: Where the suite looks for the shared traces when not told: installed with the package (examples/traces in a
#: checkout is a link to it).
DEFAULT_TRACES = Path(__file__).resolve().parent / "traces"


def load_workloads(traces_dir: str | os.PathLike | None, seed: int, names: list[str] | None = None) -> list[Workload]:
    """The shared traces in `traces_dir` (one missing is an InvalidRequestError), then the generated weeks
    (seeded by `seed` and the week's name). `names` keeps only those workloads."""
    from ..core.errors import InvalidRequestError

    out = []
    folder = Path(traces_dir) if traces_dir else DEFAULT_TRACES
    for name, file, nodes, about in TRACES:
        if names is not None and name not in names:
            continue
        path = folder / file
        if not path.is_file():  # not a card without the week, silently
            raise InvalidRequestError(f"--traces: no {file} in {folder} (the {name} week); give the folder that "
                                      f"holds it, or leave the week out with --workloads", field="--traces")
        out.append(from_trace(name, read_trace_text(path, field="--traces"), nodes=nodes, about=about))
    out += generated(lambda n: random.Random(f"{seed}:{n}"), names)
    return out


def read_trace_text(path: str | os.PathLike, *, field: str = "TRACE") -> str:
    """A trace file's text, read as UTF-8 (a byte-order mark, as Excel writes, dropped); a file that cannot
    be read or is not UTF-8 is one InvalidRequestError naming it."""
    from ..core.errors import InvalidRequestError

    try:
        return Path(path).read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise InvalidRequestError(f"cannot read trace {path}: {e.strerror or e}", field=field) from None
    except UnicodeDecodeError as e:
        raise InvalidRequestError(f"{path}: not UTF-8 text (byte {e.start}); save the trace as CSV UTF-8",
                                  field=field) from None


def read_trace(path: str | os.PathLike, *, field: str = "TRACE") -> list:
    """A trace file's jobs (read_trace_text, then parse_trace); a trace with no job (a header alone, as
    `dispatch history --csv` prints when nothing finished) is one InvalidRequestError: nothing to replay."""
    from ..core.errors import InvalidRequestError
    from ..sim.workload import parse_trace

    jobs = parse_trace(read_trace_text(path, field=field), name=str(path))
    if not jobs:
        raise InvalidRequestError(f"{path}: no jobs in this trace, only its header: nothing to replay; give a "
                                  f"trace with one job a line after the header", field=field)
    return jobs


def policy_named(spec: str):
    """A built-in name, a policy file (.toml), or a JSON object of PolicyConfig fields that override
    the defaults (the search's candidates: '{"reservations": 2}')."""
    from ..scheduler.policy_source import load_policy_file
    from ..sim.policies import SimPolicy, resolve

    if spec.startswith("{"):
        import json
        from dataclasses import replace

        from ..policy.config import PolicyConfig

        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(spec).items()}
        return SimPolicy(spec, replace(PolicyConfig(), **fields), "a variant of the defaults")
    if names_a_file(spec):
        return resolve(spec, {spec: load_policy_file(spec)[0]})
    return resolve(spec)


def names_a_file(name: str) -> bool:
    """Whether --policy/--compare's `name` is a policy file: not a built-in name, and a .toml (any case) or
    a file that is there (the live scheduler reads a policy file of any name)."""
    from ..sim.policies import BASELINES

    return name != "dispatch" and name not in BASELINES and (name.lower().endswith(".toml") or Path(name).is_file())


def simulate_one(workload: Workload, policy: str, *, estimates: str = "lognormal:1", seed: int = 1,
                 ckpt_s: tuple[float, float] = (30.0, 30.0)) -> dict:
    """The metrics of one policy on one workload (per-user figures left out: the card needs none)."""
    from ..sim.compare import simulate
    from ..sim.nodes import make_nodes
    from ..sim.workload import EstimateModel

    p = policy_named(policy)
    out = simulate(list(workload.jobs), make_nodes(workload.nodes, None), [p], estimates=EstimateModel.parse(estimates),
                   make_rng=random.Random, seed=seed, ckpt_save_s=ckpt_s[0], ckpt_restore_s=ckpt_s[1])
    m = out["policies"][p.name]
    m.pop("per_user", None)
    return m


def _job(args):
    workload, policy, kw = args
    return (workload.name, policy), simulate_one(workload, policy, **kw)


def run(workloads: list[Workload], policies: list[str], *, processes: int | None = None, known: dict | None = None,
        **kw) -> dict:
    """{(workload, policy): metrics} for every pair (the baselines always included), skipping pairs
    already in `known`. Slow pairs first, so the pool ends together."""
    names = list(dict.fromkeys(list(BASELINES) + policies))
    todo = [(w, p, kw) for w in workloads for p in names if known is None or (w.name, p) not in known]
    todo.sort(key=lambda a: -len(a[0].jobs))
    results = dict(known or {})
    n = processes or min(len(todo), os.cpu_count() or 1)
    if n <= 1 or len(todo) <= 1:
        results.update(_job(a) for a in todo)
        return results
    with ProcessPoolExecutor(max_workers=n) as pool:
        results.update(pool.map(_job, todo))
    return results


def _named(workloads: str | None, traces_dir, seed: int) -> list[Workload]:
    from ..core.errors import InvalidRequestError

    names = [n.strip() for n in workloads.split(",")] if workloads else None
    if names and ("" in names or len(set(names)) < len(names)):  # (as --compare: a typo, not a shorter list)
        raise InvalidRequestError(f"--workloads: {workloads!r} names an empty or the same week twice; name each "
                                  "week once, e.g. lab,sweeps", field="--workloads")
    ws = load_workloads(traces_dir, seed, names)
    if names:
        missing = sorted(set(names) - {w.name for w in ws})
        if missing:
            raise InvalidRequestError(f"--workloads: no workload {missing[0]!r}", field="--workloads")
    return ws


def export(folder, *, workloads: str | None = None, traces_dir=None, seed: int = 0) -> list[tuple[str, str]]:
    """Each week as FOLDER/NAME.csv; [(path, its --nodes spec)]."""
    from ..sim.workload import format_trace

    from ..core.errors import InvalidRequestError

    out = Path(folder)
    done = []
    weeks = _named(workloads, traces_dir, seed)  # a bad --workloads or --traces: no folder made
    try:
        out.mkdir(parents=True, exist_ok=True)
        for w in weeks:
            path = out / f"{w.name}.csv"
            path.write_text(format_trace(w.jobs))
            done.append((str(path), w.nodes))
    except OSError as e:
        raise InvalidRequestError(f"--export: cannot write to {folder}: {e.strerror or e}; give a folder you can "
                                  f"write", field="--export") from None
    return done


def suite_card(policies: list[str], *, workloads: str | None = None, traces_dir=None, seed: int = 0,
               estimates: str = "lognormal:1", ckpt_s=(30.0, 30.0)) -> tuple[dict, str]:
    """(the card, its text) for `policies` on the suite (`workloads`: a comma list, or all)."""
    import time

    from ..sim.suite import format_card, make_card

    ws = _named(workloads, traces_dir, seed)
    for p in policies:
        policy_named(p)  # a bad name or file: one line now, not from a worker process
    t0 = time.perf_counter()
    results = run(ws, policies, estimates=estimates, seed=seed, ckpt_s=tuple(ckpt_s))
    card = make_card(ws, results, list(dict.fromkeys(list(BASELINES) + policies)))
    card.update(seed=seed, estimates=estimates, ckpt_s=list(ckpt_s), wall_s=round(time.perf_counter() - t0, 1))
    text = format_card(card) + f"\nseed {seed}; estimates {estimates}; checkpoint save/restore {ckpt_s[0]:g}s/" \
                               f"{ckpt_s[1]:g}s; {card['wall_s']}s"
    return card, text

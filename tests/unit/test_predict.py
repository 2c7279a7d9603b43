"""The runtime predictor (dispatcher/core/predict.py): pure, table-driven, milliseconds."""

import ast
from pathlib import Path

import pytest

from dispatcher.core import predict
from dispatcher.core.model import JobSpec
from dispatcher.core.predict import Prediction, Run, estimate_ratio, fingerprint, normalise_command, policy_estimate


def spec(command=("python", "train.py"), user="alice", gpus=1, gpu_types=()):
    return JobSpec(id="1", command=tuple(command), user=user, gpus=gpus, gpu_types=gpu_types)


@pytest.mark.parametrize("command, expected", [
    (["python", "/home/a/proj/train.py", "--lr", "0.1", "--seed=3"], "python train.py --lr # --seed=#"),
    (["/usr/bin/python3", "train.py", "lr=1e-4", "data/shard_017"], "python3 train.py lr=# data/shard_#"),
    (["sh", "-c", "sleep 2.5"], "sh -c sleep #"),
    (["./run.sh", "-n", "-3"], "run.sh -n #"),
], ids=["flags", "hydra-and-paths", "inline-script", "negative"])
def test_normalise_command_strips_numbers_program_paths_and_script_paths(command, expected):
    assert normalise_command(command) == expected


def test_a_sweep_shares_a_fingerprint_and_user_size_and_type_split_it():
    base = fingerprint(spec(("python", "train.py", "--lr", "0.1")))
    assert fingerprint(spec(("python", "train.py", "--lr", "0.001"))) == base
    assert fingerprint(spec(("python", "/other/checkout/train.py", "--lr", "3"))) == base
    others = [spec(user="bob"), spec(gpus=2), spec(gpu_types=("A100",)), spec(("python", "eval.py", "--lr", "1"))]
    assert base not in {fingerprint(s) for s in others}
    assert fingerprint(spec(gpu_types=("A100", "H100"))) == fingerprint(spec(gpu_types=("h100", "a100")))
    assert len(base) == 16 and int(base, 16) >= 0


def runs(*durations, est=None, mem=None):
    return [Run(d, est, mem) for d in durations]


@pytest.mark.parametrize("same, user, expected", [
    (runs(100), runs(), None),  # one run of the command is not enough (MIN_RUNS_SAME 2)
    (runs(100, 120), runs(), (110.0, "command", 2)),  # median
    (runs(100, 120, 1000), runs(), (120.0, "command", 3)),  # median: robust to one outlier
    (runs(100), runs(10, 20, 30), (20.0, "user", 3)),  # the user's runs, any command (MIN_RUNS_USER 3)
    (runs(), runs(10, 20), None),
    (runs(*range(1, 31)), runs(), (10.5, "command", 20)),  # the newest RECENT=20 only: 1..20 -> 10.5
], ids=["one-run", "two-runs", "outlier", "user-fallback", "too-little", "recent-only"])
def test_predict_takes_the_median_of_recent_runs_of_the_command_else_of_the_user(same, user, expected):
    p = predict.predict(same, user)
    assert (None if p is None else (p.duration_s, p.source, p.runs)) == expected


def test_confidence_grows_with_runs_and_shrinks_with_spread():
    two, eight = predict.predict(runs(60, 60)), predict.predict(runs(*[60] * 8))
    assert two.confidence == 0.5  # 2 / (2 + 2) x exp(0)
    assert eight.confidence == 0.8  # 8 / (8 + 2) x exp(0)
    spread = predict.predict(runs(30, 60, 120, 240))
    assert spread.confidence < predict.predict(runs(60, 60, 60, 60)).confidence
    user = predict.predict(runs(), runs(60, 60, 60))
    assert user.confidence == 0.3  # 3 / 5 x exp(0), halved for a prediction from other commands
    assert all(0 <= p.confidence <= 1 for p in (two, eight, spread, user))


def test_peak_gpu_memory_is_the_largest_measured_peak():
    p = predict.predict([Run(10, None, 3.0), Run(10, None, None), Run(10, None, 5.5)])
    assert p.peak_gpu_mem_gb == 5.5
    assert predict.predict(runs(10, 10)).peak_gpu_mem_gb is None


@pytest.mark.parametrize("user_runs, expected", [
    (runs(200, 200, 200, est=100), 2.0),  # twice as long as estimated
    (runs(200, 200, est=100), None),  # fewer than MIN_RUNS_RATIO with an estimate
    (runs(200, 200, 200), None),  # no estimates
    (runs(1e6, 1e6, 1e6, est=1), 20.0),  # bounded
], ids=["twice", "too-few", "no-estimates", "bounded"])
def test_estimate_ratio_is_the_median_actual_over_estimate(user_runs, expected):
    assert estimate_ratio(user_runs) == expected


@pytest.mark.parametrize("est_s, ratio, expected", [
    (600.0, 2.0, 1200.0),  # the user's estimate, corrected
    (600.0, None, 600.0),  # as given
    (None, 2.0, 90.0),  # no estimate: the prediction
], ids=["corrected", "as-given", "predicted"])
def test_policy_estimate(est_s, ratio, expected):
    assert policy_estimate(est_s, Prediction(90.0, 0.5, 2, "command"), ratio) == expected
    assert policy_estimate(None, None, None) is None


def test_describe_gives_the_prediction_and_its_error():
    p = {"duration_s": 110.0, "confidence": 0.5, "runs": 2, "source": "command", "peak_gpu_mem_gb": 4.0}
    line = predict.describe(p, {"actual_s": 80.0, "error_s": 30.0, "rel_error": 0.375})
    assert line == ("110.0s (confidence 0.50, from 2 runs of this command), peak GPU memory 4 GB; "
                    "ran 80.0s: off by 30.0s (over, 38%)")
    assert predict.describe(None, None).startswith("none")


def test_the_predictor_is_pure():
    tree = ast.parse(Path(predict.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "functools", "hashlib", "math", "re", "dataclasses", "units"}, names  # units: core.units


def test_the_simulators_history_estimates_are_the_live_predictors():
    import random

    from dispatcher.policy.config import PolicyConfig
    from dispatcher.sim.engine import Engine
    from dispatcher.sim.nodes import make_nodes
    from dispatcher.sim.workload import EstimateModel, TraceJob

    # alice's 1-GPU job three times, each after the last ended, then a 2-GPU job of hers (a new fingerprint:
    # her 3 runs of any size stand in), then bob's first job (no history at all)
    trace = [TraceJob("a1", 0, "alice", 1, 100), TraceJob("a2", 200, "alice", 1, 300),
             TraceJob("a3", 1000, "alice", 1, 50), TraceJob("a4", 2000, "alice", 2, 50),
             TraceJob("b1", 3000, "bob", 1, 10)]
    result = Engine(trace, make_nodes(None, 8), PolicyConfig(), estimates=EstimateModel("history"),
                    rng=random.Random(0)).run()
    assert result.estimates == [(200.0, 50), (100.0, 50)]  # a3: median(100, 300); a4: median(100, 300, 50)

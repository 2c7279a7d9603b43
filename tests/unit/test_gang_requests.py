"""A gang's request at submit: --nodes N --gpus-per-node G (or --gpus, the total), --same-type, --hang-timeout,
and a one-line error for every bad combination, from the Python request and from `dispatch submit`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.spec import spec_from_request


def request(**fields):
    return spec_from_request({"command": ["python", "train.py"], **fields}, user="alice", submit_ms=1, cwd="/w")


@pytest.mark.parametrize("fields,nodes,per_node,gpus", [
    ({"nodes": 2, "gpus_per_node": 4}, 2, 4, 8),
    ({"nodes": 4, "gpus": 32}, 4, 8, 32),  # --gpus is the total: 8 on each
    ({"nodes": "2", "gpus_per_node": "8", "gpus": "16"}, 2, 8, 16),  # all three, agreeing (as the CLI passes them)
    ({"nodes": 1, "gpus": 3}, 1, 3, 3),  # one node: an ordinary job
    ({"gpus": 16}, 0, 0, 16),  # no --nodes: one node, or whole nodes if larger than any (an auto gang)
])
def test_a_gang_asks_for_nodes_and_gpus_on_each(fields, nodes, per_node, gpus):
    spec = request(**fields)
    assert (spec.nodes, spec.gpus_per_node, spec.gpus) == (nodes, per_node, gpus)
    assert spec.same_type and spec.hang_timeout_s is None


def test_cpus_and_memory_stay_per_node_and_types_may_mix_when_asked():
    spec = request(nodes=2, gpus_per_node=4, cpus=8, mem=64, gpu_type="A100", same_type=False)
    assert (spec.cpus, spec.mem_gb, spec.gpu_types, spec.same_type) == (8, 64.0, ("A100",), False)


@pytest.mark.parametrize("value,seconds", [("30m", 1800.0), ("1h30m", 5400.0), (90, 90.0)])
def test_a_hang_timeout_is_a_duration_for_any_job(value, seconds):
    assert request(hang_timeout=value).hang_timeout_s == seconds
    assert request(nodes=2, gpus=4, hang_timeout=value).hang_timeout_s == seconds


@pytest.mark.parametrize("fields,flag,words", [
    ({"nodes": 2, "gpus": 7}, "--gpus", "7 GPUs do not divide evenly over --nodes 2"),
    ({"nodes": 2, "gpus_per_node": 4, "gpus": 6}, "--gpus", "6 is not --nodes 2 x --gpus-per-node 4 = 8"),
    ({"gpus_per_node": 4}, "--gpus-per-node", "needs --nodes N"),
    ({"nodes": 2}, "--nodes", "a gang of 2 nodes needs GPUs"),
    ({"nodes": 2, "gpus_per_node": 4, "share": True, "gpu_mem": 10}, "--share", "cannot share its GPUs"),
    ({"nodes": 2, "gpus": "4-8"}, "--gpus", "cannot be elastic"),
    ({"nodes": 2, "gpus": 8, "min_gpus": 2, "checkpointable": True}, "--min-gpus", "cannot be shrunk"),
    ({"nodes": 0, "gpus": 8}, "--nodes", "out of range"),
    ({"nodes": 1025, "gpus_per_node": 1}, "--nodes", "out of range"),
    ({"nodes": "two", "gpus": 8}, "--nodes", "not a whole number"),
    ({"nodes": 2, "gpus_per_node": 65}, "--gpus-per-node", "out of range"),
    ({"nodes": 2, "gpus_per_node": 0}, "--gpus-per-node", "out of range"),
    ({"nodes": 2, "gpus": 256}, "--gpus", "128 GPUs per node; at most 64"),
    ({"nodes": 1000, "gpus_per_node": 2}, "--nodes", "at most 1024 in all"),
    ({"hang_timeout": "0"}, "--hang-timeout", "must be positive"),
    ({"hang_timeout": 0}, "--hang-timeout", "out of range"),
    ({"hang_timeout": "soon"}, "--hang-timeout", "not a duration"),
])
def test_every_bad_combination_is_refused_naming_its_flag(fields, flag, words):
    with pytest.raises(InvalidRequestError) as e:
        request(**fields)
    assert e.value.field == flag and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("argv,words", [
    (["--nodes", "2", "--gpus", "7"], "--gpus: 7 GPUs do not divide evenly over --nodes 2"),
    (["--gpus-per-node", "4"], "--gpus-per-node needs --nodes N"),
    (["--nodes", "2", "--gpus-per-node", "4", "--share", "--gpu-mem", "10"], "--share: a gang (--nodes 2) cannot"),
    (["--hang-timeout", "later"], "--hang-timeout: 'later' is not a duration"),
])
def test_dispatch_submit_says_what_is_wrong_in_one_line(argv, words):
    code = "import sys; from dispatcher.cli import main; sys.argv = ['dispatch', 'submit', *sys.argv[1:]]; main()"
    done = subprocess.run([sys.executable, "-c", code, *argv, "--", "true"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"dispatch: error: {words}")
    assert len(done.stderr.strip().splitlines()) == 1 and "Usage" not in done.stderr and not done.stdout


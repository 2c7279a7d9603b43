"""The simulator's gangs (jobs larger than any node, on whole nodes): the policy places them as it always
did on one GPU family, and keeps each on one family on a mixed cluster."""

import random

from dispatcher.sim.compare import simulate
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.policies import dispatch_policy
from dispatcher.sim.workload import EstimateModel, TraceJob


def starts(trace, nodes):
    out = simulate(trace, make_nodes(nodes, None), [dispatch_policy()], estimates=EstimateModel.parse("oracle"),
                   make_rng=random.Random, seed=0)
    assert out["policies"]["dispatch"]["finished"] == len(trace)
    return {job: (t, node) for t, job, node, _, _ in out["results"]["dispatch"].starts}


def test_gangs_take_whole_nodes_in_name_order_and_wait_for_them():
    trace = [TraceJob("small", 0, "u", 4, 100, (), "normal"), TraceJob("two", 1, "u", 16, 50, (), "normal"),
             TraceJob("three", 2, "u", 24, 10, (), "normal")]
    got = starts(trace, "3x8xA100-80GB")
    assert got["small"] == (0, "a100-80gb-000")
    assert got["two"] == (1, "a100-80gb-001")  # a100-80gb-000 is not whole: 001 and 002
    assert got["three"][0] == 100  # all three nodes whole again once `small` ends


def test_a_gang_keeps_to_one_gpu_family():
    trace = [TraceJob("a", 0, "u", 8, 100, ("A100",), "normal"), TraceJob("big", 1, "u", 16, 50, (), "normal")]
    got = starts(trace, "2x8xA100-80GB,2x8xV100-32GB")
    assert got["a"] == (0, "a100-80gb-000")
    assert got["big"] == (1, "v100-32gb-002")  # not a100-80gb-001 with a V100 node

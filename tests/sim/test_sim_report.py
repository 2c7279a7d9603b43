"""What `dispatch simulate` reports of a run in which jobs never finish: shares stay shares. Reporting
only: the policy decides the same."""

import random
from dataclasses import replace

from dispatcher.policy.config import PolicyConfig
from dispatcher.sim.compare import simulate
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.policies import SimPolicy
from dispatcher.sim.workload import EstimateModel, TraceJob

#: Eight GPUs all kept for high work: a normal 4-GPU job that fits the node never starts.
LANE = SimPolicy("lane", replace(PolicyConfig(), reserve={"high": 8}), "a high lane of the whole node")
HIGH_THEN_NORMAL = [TraceJob("h", 0, "u", 1, 600, (), "high"), TraceJob("n", 10, "v", 4, 600, (), "normal")]


def run(trace, policies, nodes=None, gpus=8):
    return simulate(trace, make_nodes(nodes, None if nodes else gpus), policies,
                    estimates=EstimateModel.parse("oracle"), make_rng=random.Random, seed=0)


def test_fragmentation_stays_a_share_when_a_job_that_fits_never_starts():
    # n waits from 10 s; the run's makespan ends with h at 600 s, but ticks went on while n waited
    # (to 324,010 s): that free GPU-time was counted against a 600 s makespan (frag 540).
    m = run(HIGH_THEN_NORMAL, [LANE])["policies"]["lane"]
    assert m["makespan_s"] == 600.0
    assert m["fragmentation"] == round(7 * 590 / (8 * 600), 4)  # 7 GPUs free while n waited, 10 s to 600 s
    assert 0.0 <= m["utilization"] <= 1.0 and m["utilization"] == 0.125

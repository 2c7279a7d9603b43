"""A running gang as the policy sees it: one piece per rank's node, less the ranks whose end is recorded."""

from dispatcher.core.model import JobSpec
from dispatcher.core.plan import RunningJob, is_gang_piece, pieces
from dispatcher.store.job_record import gang_ranks, gang_text

SPEC = JobSpec(id="7", command=("x",), gpus=4, nodes=2, gpus_per_node=2)


def test_a_gang_field_reads_back_as_it_was_written():
    ranks = (("n1", (0, 1)), ("n2", (2, 3)))
    assert gang_ranks(gang_text(ranks)) == ranks
    assert gang_ranks("") == () and gang_ranks("garbage") == ()


def test_each_rank_is_a_piece_on_its_node_until_its_end_is_recorded():
    job = RunningJob(SPEC, "n1", (0, 1), 0, extra=(("n2", (2, 3)),))
    shown = pieces([job, RunningJob(JobSpec(id="8", command=("y",), gpus=1), "n3", (0,), 0)])
    assert [(p.spec.id, p.node, p.gpus, p.rank) for p in shown] == [("7", "n1", (0, 1), 0), ("7", "n2", (2, 3), 1),
                                                                    ("8", "n3", (0,), 0)]
    assert [is_gang_piece(p) for p in shown] == [True, True, False]
    after_rank_1 = pieces([RunningJob(SPEC, "n1", (0, 1), 0, extra=(("n2", (2, 3)),), ended=frozenset({1}))])
    assert [(p.node, p.rank) for p in after_rank_1] == [("n1", 0)]
    after_rank_0 = pieces([RunningJob(SPEC, "n1", (0, 1), 0, extra=(("n2", (2, 3)),), ended=frozenset({0}))])
    assert [(p.node, p.rank, is_gang_piece(p)) for p in after_rank_0] == [("n2", 1, True)]

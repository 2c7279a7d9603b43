"""What an agent kept on disk while Redis was away (workers/outbox.py) reaches Redis as it was: a gang
rank's output goes to that rank's log, not rank 0's."""

from dispatcher.store.jobs import read_log
from dispatcher.store.scripts import Scripts
from workers.jobs import Supervisor


def test_a_gang_ranks_output_kept_while_redis_was_away_goes_to_that_ranks_log(client, ns, tmp_path):
    sup = Supervisor(client, ns, "n2", Scripts(client, ns), tmp_path / "work")
    sup.outbox.add("log", "55", 1, b"rank1-line6\n", 1)
    sup.outbox.add("log", "55", 1, b"from an older agent\n")  # (no rank: rank 0's, as before)
    sup.flush_outbox()
    assert b"".join(c for _, c in read_log(client, ns, "55", rank=1)) == b"rank1-line6\n"
    assert b"".join(c for _, c in read_log(client, ns, "55")) == b"from an older agent\n"

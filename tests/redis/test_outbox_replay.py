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


def test_an_end_the_keeper_recorded_meanwhile_is_dropped_in_one_line_that_says_so(client, ns, tmp_path, caplog):
    # the log said "outcome succeeded refused (epoch 1 is stale)", then "finish recorded after Redis came back"
    import logging

    from dispatcher.clock import now_ms
    from dispatcher.core.spec import build_spec
    from dispatcher.store.jobs import read_job, write_jobs

    (job,) = write_jobs(client, ns, [build_spec(command=["true"], user="u", submit_ms=now_ms(), gpus=0)])
    scripts = Scripts(client, ns)
    epoch = scripts.commit_placement(job, "n2", (), 0, now_ms())
    assert scripts.mark_running(job, epoch, now_ms(), 4242) == 1
    assert scripts.finish(job, "n2", epoch, "succeeded", 0, now_ms(), "") == 1  # (the keeper's record)
    sup = Supervisor(client, ns, "n2", scripts, tmp_path / "work")
    sup.outbox.add("finish", job, epoch, "succeeded", 0, "", {"at_ms": now_ms()})
    with caplog.at_level(logging.INFO, logger="dispatch"):
        sup.flush_outbox()
    said = [r.getMessage() for r in caplog.records if job in r.getMessage()]
    assert said == [f"job {job}: its finish, kept while Redis was away, was recorded already or is stale; dropped"], \
        said
    assert read_job(client, ns, job)["state"] == "succeeded" and sup.outbox.first() is None

"""`dispatch why` says how far a waiting job is from its class's promise, against a real server."""

import json

from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import write_jobs


def test_why_tells_a_waiting_low_job_how_far_it_is_from_its_class_target(client, ns, cli):
    # submitted three days ago, no node at all: it waits, and why says where it stands against 12 days
    spec = build_spec(command=["true"], user="lou", submit_ms=now_ms() - 3 * 86400 * 1000, gpus=1, priority="low")
    (job_id,) = write_jobs(client, ns, [spec])
    out = cli.run("why", job_id)
    assert out.returncode == 0, out.stderr
    line = next((ln for ln in out.stdout.splitlines() if "promise:" in ln), "")
    assert "waited 3d of the low class's 12d target (25%); past 6d it goes ahead of every class" in line, out.stdout
    got = json.loads(cli.run("why", job_id, "--json").stdout)["promise"]
    assert (got["class"], got["target_s"], got["starving_after_s"]) == ("low", 12 * 86400.0, 6 * 86400.0)
    assert 0.24 < got["share"] < 0.26

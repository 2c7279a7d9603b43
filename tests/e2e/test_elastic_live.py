"""An elastic job as a user meets it (`--gpus 1-8 --scaling linear`): a real scheduler and a fake-GPU
node agent give it all 8 GPUs on an idle node, and 2 when six are busy with long jobs; `dispatch why`
says why, with the expected finish of each count."""

import json


def test_an_elastic_job_gets_8_gpus_when_idle_and_2_beside_long_jobs(cli):
    cli.start("scheduler")
    cli.start("worker", "--node", "n1", "--fake-gpus", "8xA100-80GB", "--cpus", "16", "--mem", "64")
    elastic = ["--gpus", "1-8", "--scaling", "linear", "--est", "1h", "--", "sleep", "60"]

    alone = cli.submit(*elastic)
    job = cli.wait_for(lambda: cli.show(alone)["node"] and cli.show(alone), what="the elastic job to start")
    assert len(job["gpus"]) == 8, job
    cli.run("cancel", alone)
    cli.wait_for(lambda: cli.show(alone)["state"] == "cancelled", what="the cancel")

    longs = [cli.submit("--gpus", "1", "--est", "10h", "--", "sleep", "60") for _ in range(6)]
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in longs), what="six long jobs running")
    beside = cli.submit(*elastic)
    job = cli.wait_for(lambda: cli.show(beside)["node"] and cli.show(beside), what="the second elastic job")
    assert len(job["gpus"]) == 2, job

    why = cli.run("why", beside).stdout
    assert "elastic: 2 GPUs finish soonest" in why and "runs ~4h" in why and "8 starts in ~10h" in why, why
    decided = json.loads(cli.run("why", beside, "--json").stdout)["decisions"][0]
    assert decided["gpus"] == job["gpus"] and "elastic: 2 GPUs" in decided["why"], decided

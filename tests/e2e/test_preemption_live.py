"""Preemption end to end: real scheduler and agent processes, real signals, real checkpoints."""

import json
import os
import signal
import time

import pytest

pytestmark = pytest.mark.slow

# A job that counts to 15 in steps of 0.2 s, saves its step on SIGTERM, and resumes from it.
CHECKPOINTING = r"""
ck=$DISPATCH_CHECKPOINT_DIR/step; step=0
if [ "$DISPATCH_RESUME" = 1 ] && [ -f "$ck" ]; then step=$(cat "$ck"); echo "resumed at step $step attempt $DISPATCH_ATTEMPT"; fi
trap 'echo $step > "$ck"; echo "checkpointed at step $step"; exit 0' TERM
while [ $step -lt 15 ]; do step=$((step+1)); sleep 0.2; done
echo "done with $DISPATCH_GPUS GPUs"
"""


@pytest.fixture
def fast_policy(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text('[defaults]\nmin_run = "0s"\npreempt_cooldown = "0s"\n')
    return str(path)


def test_a_critical_job_preempts_exactly_one_checkpointable_low_job_which_resumes(cli, fast_policy):
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler", "--policy", fast_policy)
    lows = [cli.submit("--priority", "low", "--gpus", "1", "--checkpointable", "--grace", "10s", "--",
                       "sh", "-c", CHECKPOINTING) for _ in range(2)]
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in lows), what="the low jobs to run")
    submitted = time.time()
    crit = cli.submit("--priority", "critical", "--gpus", "1", "--", "sh", "-c", "echo critical ran")
    started = cli.wait_for(lambda: cli.show(crit)["started_at"], timeout=20, what="the critical job to start")
    assert started - submitted < 5, f"critical started {started - submitted:.2f}s after submit"

    assert cli.run("wait", crit, *lows, "--timeout", "60").returncode == 0
    shown = {j: cli.show(j) for j in lows}
    victims = [j for j, s in shown.items() if s["preemptions"]]
    if len(victims) != 1:
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(cli.home.glob("*.log")))
        (cli.home.parent / "preempt-failure.txt").write_text(logs)
    assert len(victims) == 1, {j: (s["preemptions"], s["preempted_by"], s["preempt_reason"]) for j, s in shown.items()}
    (victim,) = victims
    log = cli.run("logs", victim).stdout
    assert "checkpointed at step" in log and "resumed at step" in log and "attempt 1" in log, log
    v = shown[victim]
    assert v["attempt"] == 1 and v["preempted_by"] == f"job {crit}" and v["gpu_s_lost"] >= 0
    assert all(s["state"] == "succeeded" for s in shown.values())
    kinds = {(d["kind"], d["job"]) for d in json.loads(cli.run("decisions", "--json").stdout)}
    assert ("preempt", victim) in kinds and ("start", crit) in kinds
    table = cli.run("decisions").stdout
    assert any(ln.split()[1:3] == ["preempt", victim] and f"for {crit}" in ln for ln in table.splitlines()), table
    said = cli.run("why", victim).stdout  # the victim's view, and the preemptor's, of the same decision
    assert f"preempted (graceful) on n1 for job {crit}" in said, said
    assert f"preempted job {victim} on n1 (graceful) to start" in cli.run("why", crit).stdout


def test_a_preempt_sent_while_the_agent_is_stopped_is_carried_out_when_it_returns(cli):
    agent = cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    job = cli.submit("--gpus", "1", "--checkpointable", "--", "sh", "-c", CHECKPOINTING.replace("15", "200"))
    cli.wait_for(lambda: cli.show(job)["state"] == "running", what="the job to run")
    os.killpg(agent.pid, signal.SIGSTOP)  # the agent is frozen: it reads no command
    try:
        assert "preemption sent" in cli.run("preempt", job).stdout
        time.sleep(1.0)
        assert cli.show(job)["state"] == "preempting"
    finally:
        os.killpg(agent.pid, signal.SIGCONT)
    cli.wait_for(lambda: cli.show(job)["preemptions"] == 1, what="the preemption to be carried out")
    cli.wait_for(lambda: "resumed at step" in cli.run("logs", job).stdout, what="the job to resume")
    cli.run("cancel", job)


@pytest.mark.parametrize("identity", [False, True], ids=["identity-off", "identity-on"])
def test_an_elastic_job_shrinks_instead_of_stopping(cli, client, fast_policy, tmp_path, identity):
    """With identity on, the shrunk attempt is the node's own relaunch: it seals it itself."""
    flags, me = [], {}
    if identity:
        secret = tmp_path / "secret"
        secret.write_text(os.urandom(32).hex())
        secret.chmod(0o600)
        flags = ["--secret-file", str(secret)]
        me = {"DISPATCH_USER": "alice",
              "DISPATCH_TOKEN": cli.run("auth", "token", "alice", "--secret-file", str(secret)).stdout.strip()}
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB", *flags)
    cli.start("scheduler", "--policy", fast_policy, *flags)
    if identity:
        from dispatcher.store.requests import identity_on

        cli.wait_for(lambda: identity_on(client, cli.ns), what="the scheduler to turn identity on")
    elastic = cli.run("submit", "--priority", "low", "--gpus", "2", "--min-gpus", "1", "--checkpointable", "--",
                      "sh", "-c", CHECKPOINTING, **me).stdout.strip()
    cli.wait_for(lambda: cli.show(elastic)["state"] == "running", what="the elastic job")
    crit = cli.run("submit", "--priority", "critical", "--gpus", "1", "--", "true", **me).stdout.strip()
    assert cli.run("wait", crit, elastic, "--timeout", "60").returncode == 0
    e = cli.show(elastic)
    log = cli.run("logs", elastic).stdout
    assert e["preemptions"] == 1 and len(e["gpus"]) == 1, e
    assert "resumed at step" in log and "done with 1 GPUs" in log, log


def test_an_operator_preempts_only_checkpointable_jobs_unless_forced(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    job = cli.submit("--gpus", "1", "--", "sleep", "30")
    cli.wait_for(lambda: cli.show(job)["state"] == "running", what="the job to run")
    refused = cli.run("preempt", job, check=False)
    assert refused.returncode == 2 and "not checkpointable" in refused.stderr and "--force" in refused.stderr
    time.sleep(1.1)
    assert "forced preemption sent" in cli.run("preempt", job, "--force").stdout
    cli.wait_for(lambda: cli.show(job)["preemptions"] == 1, what="the forced preemption")
    shown = cli.show(job)
    assert shown["gpu_s_lost"] >= 1.0 and shown["preempt_mode"] == "forced", shown
    cli.wait_for(lambda: cli.show(job)["state"] == "running", what="the job to run again")
    assert cli.show(job)["attempt"] == 1
    cli.run("cancel", job)
    assert cli.run("preempt", job, check=False).returncode != 0


def test_a_checkpoint_reported_at_the_signal_counts_though_the_job_exits_at_once(cli):
    """QA: a job that saves on its checkpoint signal, touches $DISPATCH_CHECKPOINT_DIR/CHECKPOINTED and exits
    (docs/distributed.md's pattern) had no checkpoint_at and all its run counted in gpu_s_lost: the agent
    looks at the file once a heartbeat, and the job was gone before the next look. Its end looks once more."""
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", DISPATCH_HEARTBEAT_S="5",
              DISPATCH_NODE_TIMEOUT_S="60")
    cli.start("scheduler", DISPATCH_NODE_TIMEOUT_S="60")
    saves = ('trap \'echo saved > "$DISPATCH_CHECKPOINT_DIR/step"; touch "$DISPATCH_CHECKPOINT_DIR/CHECKPOINTED"; '
             'exit 0\' TERM; echo running; while :; do sleep 0.1; done')
    job = cli.submit("--gpus", "1", "--checkpointable", "--", "sh", "-c", saves)
    cli.wait_for(lambda: "running" in cli.run("logs", job).stdout, what="the job to run")
    time.sleep(3)  # 3 GPU-seconds of work, all of it saved at the signal
    cli.run("preempt", job)
    cli.wait_for(lambda: cli.show(job)["preemptions"] == 1, what="the preemption")
    shown = cli.show(job)
    assert shown["checkpoint_at"] is not None and shown["gpu_s_lost"] < 1.0, shown
    cli.run("cancel", job)

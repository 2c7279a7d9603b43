"""The request flags `dispatch submit` and `dispatch shell` share (a job's name and what it asks for), as one
decorator both commands use; their values are the request's fields (core/spec.py REQUEST_FIELDS)."""

from __future__ import annotations

import click


def resources(priority: str = "normal", session: bool = False):
    """--name, --team, --gpus, --gpu-type, --gpu-mem, --cpus, --mem, --priority (default `priority`), --time;
    -J, -c and -t as Slurm's (--job-name, --cpus-per-task, --time). `session`: an interactive job's (one node)."""
    options = [
        click.option("--name", "-J", "name", default=None, help="A name for the job."),
        click.option("--team", default=None, help="Team, for quotas."),
        click.option("--gpus", default="0", metavar="N" if session else "N|MIN-MAX", show_default=True,
                     help="Number of GPUs, on one node (0: CPU only)." if session else
                          "Number of GPUs, all on one node (0: CPU only); a range (1-8) lets the scheduler choose. "
                          "With --nodes: the total. More than any node has: as many whole nodes as they fill."),
        click.option("--gpu-type", default=None, metavar="T", help="Acceptable GPU families, e.g. A100 or 'A100|H100'."),
        click.option("--gpu-mem", default="0", metavar="GB", help="Minimum memory of each GPU, in GB (or 40G, 512M)."),
        click.option("--cpus", "-c", "cpus", default="1", metavar="N", show_default=True,
                     help="CPU cores (a gang: on each node)."),
        click.option("--mem", default="0", metavar="GB", help="Host memory, in GB (or 64G, 512M; a gang: on each node)."),
        click.option("--priority", default=priority, metavar="P", help="critical, high, normal or low."),
        click.option("--time", "-t", "time", default=None, metavar="DURATION",
                     help="Run-time limit of each attempt (Slurm's --time): the checkpoint signal at the limit, "
                          "SIGKILL the job's grace (submit's --grace) later, and the job fails: 90s, 15m, 3h, 1d, or Slurm's forms: "
                          "30 (a bare number is minutes), 30:00, 1:00:00, 2-12, 2-12:00:00; UNLIMITED for none."),
    ]

    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


def session_request(flags: dict, **fields) -> dict:
    """The request of an interactive job (shell, notebook) from its resources() flags and `fields`: on one
    node always (nodes=1). Never an auto gang of whole nodes, which would start the shell or the server
    once per node, each reading the same keystrokes; more GPUs than any node has waits as no fit."""
    request = {k: v for k, v in flags.items() if v is not None}
    request.update(nodes=1, **fields)
    return request


def alerts_option(fn):
    """--alerts (and DISPATCH_ALERTS) are gone: the thresholds are the policy file's [alerts] table, one
    place for every view. Kept hidden, to say so."""
    return click.option("--alerts", default=None, envvar="DISPATCH_ALERTS", hidden=True)(fn)


def no_alerts_flag(alerts) -> None:
    if alerts:
        from ..core.errors import ConfigError

        raise ConfigError("--alerts (or DISPATCH_ALERTS): alert thresholds are set in the policy file's [alerts] "
                          "table now, so the page, top and /metrics show the same alerts; e.g. [alerts] "
                          "critical_wait = \"5m\" (docs/dashboard.md#alerts)", key="--alerts")


#: What dispatch has for the sbatch/srun flags it does not take, said when one is given.
SLURM_FLAGS = {
    ("--gres", "-G", "--gpus-per-task", "--gpus-per-socket"): "GPUs are --gpus N with --gpu-type T (Slurm's "
                                                             "--gres gpu:a100:2 is --gpus 2 --gpu-type A100)",
    ("--partition", "-p"): "dispatch has no partitions: --gpu-type picks the GPU family, --priority the class",
    ("--qos", "-q"): "the class is --priority critical|high|normal|low",
    ("--account", "-A"): "quotas count by --team",
    ("--mail-type", "--mail-user"): "--notify CMD|URL is told when the job ends",
    ("--error", "-e"): "stdout and stderr go together to the log (dispatch logs) and to --output",
    ("--exclude", "-x", "--nodelist", "-w"): "the scheduler picks the node; an admin keeps jobs off one with "
                                             "dispatch drain NODE",
    ("--export",): "--env K=V gives the job a variable (repeatable); it inherits none of the submitter's",
    ("--parsable",): "submit prints the job's id alone already",
    ("--signal",): "--checkpoint-signal SIG is sent at --time and on a graceful preemption",
    ("--ntasks", "-n", "--ntasks-per-node"): "a job is one process per node: --nodes N runs it on N nodes",
}


def slurm_hint(option: str) -> str | None:
    """What dispatch has for the sbatch flag `option`, or None."""
    return next((hint for flags, hint in SLURM_FLAGS.items() if option in flags), None)

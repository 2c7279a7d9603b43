"""The plot of a comparison (PNG, SVG, PDF, ...): JCT CDF per policy, queue length and GPU utilization over time.

Needs matplotlib (the optional extra `plot`); everything else in the simulator does not.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError, InvalidRequestError


def _matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'dispatch-gpu[plot]'", key="--plot") from None
    return plt


#: The files --plot writes: formats matplotlib saves quietly, without LaTeX (pgf needs it), an optional Pillow
#: codec (avif) or a warning on every plot (eps and ps drop transparency).
FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "tif", "tiff", "svgz")


def check_path(path: str) -> None:
    """Before a run: one line if matplotlib is missing, `path`'s suffix is not one of FORMATS, or its folder
    is not there (so a bad --plot loses no run)."""
    _matplotlib()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        said = f"a .{suffix} file" if suffix else "a name without a suffix"
        raise InvalidRequestError(f"--plot {path}: cannot write {said}; end the name in .png, .svg or .pdf (or "
                                  f"{', '.join('.' + f for f in FORMATS[3:])})", field="--plot")
    check_file_path(path, "--plot", "sim.png")


def check_file_path(path: str, flag: str, example: str) -> None:
    """One line if the file `path` (given as `flag`) could not be written for its name: a folder, or in a
    folder that is not there (checked before a run, so that a bad name loses no run)."""
    p = Path(path)
    if p.is_dir():
        raise InvalidRequestError(f"{flag} {path}: is a folder; give a file name, e.g. {p / example}", field=flag)
    if not p.parent.is_dir():
        raise InvalidRequestError(f"{flag} {path}: no folder {p.parent}", field=flag)


def plot(out: dict, path: str) -> None:
    plt = _matplotlib()
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(10, 11))
    for name, result in out["results"].items():
        jcts = sorted(j.end_s - j.trace.submit_s for j in result.jobs if j.end_s is not None)
        if jcts:
            a.plot([max(x, 1.0) for x in jcts], [(i + 1) / len(jcts) for i in range(len(jcts))], label=name)
        tl = result.timeline
        hours = [t / 3600 for t, *_ in tl]
        b.step(hours, [q for _, q, _, _ in tl], where="post", label=name)
        c.step(hours, [busy / result.total_gpus for _, _, busy, _ in tl], where="post", label=name)
    a.set_xscale("log")
    a.set(title="Job completion time (CDF)", xlabel="JCT, seconds (log)", ylabel="fraction of jobs")
    b.set(title="Jobs waiting", xlabel="hours", ylabel="pending jobs")
    c.set(title="GPU utilization", xlabel="hours", ylabel="busy GPUs / all GPUs", ylim=(0, 1.05))
    for ax in (a, b, c):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # none when no job finished: matplotlib would warn on stderr
            ax.legend(fontsize=8)
    fig.suptitle(f"{out['jobs']} jobs on {out['gpus']} GPUs, estimates {out['estimates']}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise InvalidRequestError(f"--plot: cannot write {path}: {e.strerror or e}", field="--plot") from None
    finally:
        plt.close(fig)

"""Run histories in Redis (written by finish.lua), read at submit to predict each new job.

finish.lua LPUSHes one msgpack map per successful job to the list of its fingerprint and to its
user's (keys.history, keys.user_history), trimmed to predict.KEPT_*: `d` run time in seconds over
all attempts, `e` the user's estimate (absent: none), `m` the peak GPU memory in GB the agent
measured (absent: none), `t` when it ended (ms). A malformed entry is skipped, never an error.
"""

from __future__ import annotations

import math

import msgpack

from ..core import predict
from . import keys


def decode_run(raw) -> predict.Run | None:
    """One history entry -> Run; None if it is malformed."""
    try:
        d = msgpack.unpackb(raw, raw=False)
        dur, est, mem = d["d"], d.get("e"), d.get("m")
    except Exception:  # not msgpack, not a map, no duration: any garbage is skipped
        return None
    if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not 0 < dur < 1e10:
        return None
    est = float(est) if isinstance(est, (int, float)) and not isinstance(est, bool) and 0 < est < 1e10 else None
    mem = float(mem) if isinstance(mem, (int, float)) and not isinstance(mem, bool) and 0 <= mem < 1e7 else None
    return predict.Run(float(dur), est, mem)


def decode_runs(reply) -> list[predict.Run]:
    """A history list as LRANGE gave it (newest first), malformed entries skipped; [] for an error
    reply (a key of the wrong type)."""
    if not isinstance(reply, list):
        return []
    return [r for r in map(decode_run, reply) if r is not None]


class Predictor:
    """Predictions for a batch of specs from one pipelined round trip: `queue(pipe, specs)` adds the
    LRANGEs of their fingerprints' and users' histories, `fields(replies)` (the replies of those
    commands, in order) gives the hash fields each job gets (keys.py: pred_*, plan_est_s)."""

    def __init__(self, ns: str):
        self.ns = ns
        self.fps: list[str] = []
        self.specs: list = []
        self._fp_order: list[str] = []
        self._user_order: list[str] = []

    def queue(self, pipe, specs) -> int:
        """Adds the reads to `pipe`; returns how many commands it added."""
        self.specs = list(specs)
        self.fps = [predict.fingerprint(s) for s in self.specs]
        self._fp_order = list(dict.fromkeys(self.fps))
        self._user_order = list(dict.fromkeys(s.user for s in self.specs))
        for fp in self._fp_order:
            pipe.lrange(keys.history(self.ns, fp), 0, predict.RECENT - 1)
        for user in self._user_order:
            pipe.lrange(keys.user_history(self.ns, user), 0, predict.RECENT - 1)
        return len(self._fp_order) + len(self._user_order)

    def fields(self, replies) -> list[dict]:
        n = len(self._fp_order)
        same = {fp: decode_runs(r) for fp, r in zip(self._fp_order, replies[:n])}
        users = {u: decode_runs(r) for u, r in zip(self._user_order, replies[n:])}
        ratios = {u: predict.estimate_ratio(runs) for u, runs in users.items()}
        memo: dict = {}
        out = []
        for spec, fp in zip(self.specs, self.fps):
            key = (fp, spec.est_s)
            if key not in memo:
                memo[key] = {**_fields(spec.est_s, predict.predict(same[fp], users[spec.user]), ratios[spec.user]),
                             "fp": fp}
            out.append(memo[key])
        return out


def _fields(est_s, p: predict.Prediction | None, ratio) -> dict:
    f: dict = {}
    if p is not None:
        f.update(pred_s=p.duration_s, pred_conf=p.confidence, pred_runs=p.runs, pred_src=p.source)
        if p.peak_gpu_mem_gb is not None:
            f["pred_mem_gb"] = p.peak_gpu_mem_gb
    plan = predict.policy_estimate(est_s, p, ratio)
    if plan is not None and plan != est_s:
        f["plan_est_s"] = round(plan, 3)
    return f


def plan_estimate(raw) -> float | None:
    """The hash field plan_est_s as the policy's estimate; None when absent or not a positive number."""
    if raw is None:
        return None
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    return v if 0 < v < 1e10 and math.isfinite(v) else None

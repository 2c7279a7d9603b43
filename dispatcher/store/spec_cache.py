"""Job specs as the policy sees them, decoded once and kept across reads (specs are immutable; a changed
job's is dropped and read again).

The estimate the policy plans with, never past the job's --time (a job with a limit and no estimate plans
with its limit), is the job's plan_est_s (store/history.py: the user's estimate
corrected by their history, or the prediction from earlier runs of the same command), which submit
wrote from the history of that moment. Twins (one history: user, command with its numbers masked,
GPU count and types; and the same estimate of their own, or none) share the newest one's: else a job
submitted after earlier runs of its command finished (its prediction says 2 minutes) ranks above its
older twins (no prediction then: 'unknown'), and a sweep's jobs start newest first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..core.errors import MalformedRecord
from ..core.predict import fingerprint, within_limit
from .codec import decode_spec
from .history import plan_estimate


#: A fingerprint as core/predict.py makes it (a record's that is not one is worked out again).
_FP = re.compile(r"[0-9a-f]{16}")


def kind_of(spec, fp=None) -> tuple:
    """What makes two jobs twins for their estimate: one history (core/predict.py's fingerprint: user,
    command with its numbers masked, GPU request: a sweep's points too, `--seed 4` and `--seed 5`), and
    the same estimate of their own (or none)."""
    fp = fp.decode("ascii", "replace") if isinstance(fp, bytes) else fp
    return fp if isinstance(fp, str) and _FP.fullmatch(fp) else fingerprint(spec), spec.est_s


@dataclass
class SpecCache:
    specs: dict = field(default_factory=dict)
    #: kind -> (submit ms, job id, plan estimate) of the newest job of that kind with one
    newest: dict = field(default_factory=dict)
    #: kind -> the id of its one job in `specs`, or the set of them; job id -> its kind
    members: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)
    #: kinds whose newest estimate changed since take_restamped (their older twins take it there: once
    #: per read, not once per newer twin met, which a whole read meets oldest first)
    dirty: set = field(default_factory=set)

    def get(self, job_id: str, raw, plan_est=None, fp=None):
        """The job's spec as the policy sees it: est_s is its plan estimate, or its newest twin's. A local
        copy; the stored spec, which agents check signatures on, never changes. `fp`: its record's
        fingerprint, which submit wrote (else it is worked out here: ~5 us a job)."""
        spec = self.specs.get(job_id)
        if spec is None:  # (the read asks for the spec of a job whose spec is not here: a record without one)
            if raw is None:
                raise MalformedRecord(f"job {job_id}", "the record holds no spec")
            spec = decode_spec(raw, key=f"job {job_id}")
            if spec.id != job_id:
                raise MalformedRecord(f"job {job_id}", f"its spec is for job {spec.id!r}")
            spec = self._planned(job_id, spec, plan_estimate(plan_est), fp)
            self.specs[job_id] = spec
        return spec

    def _planned(self, job_id: str, spec, est_s, fp=None):
        kind = kind_of(spec, fp)
        twins = self.members.get(kind)
        if twins is None:  # most jobs have no twin: an id, not a set
            self.members[kind] = job_id
        else:
            kind = self.kinds[next(iter(twins)) if isinstance(twins, set) else twins]  # one key object per kind
            if isinstance(twins, set):
                twins.add(job_id)
            else:
                self.members[kind] = {twins, job_id}
        self.kinds[job_id] = kind
        newest = self.newest.get(kind)
        mine = (spec.submit_ms, job_id)
        if est_s is not None and (newest is None or mine > newest[:2]):
            self.newest[kind] = (*mine, est_s)
            if newest is None or newest[2] != est_s:
                self.dirty.add(kind)
        elif newest is not None and mine < newest[:2]:
            est_s = newest[2]
        est_s = within_limit(spec.est_s if est_s is None else est_s, spec.time_limit_s)
        return spec if est_s == spec.est_s else replace(spec, est_s=est_s)

    def take_restamped(self) -> set[str]:
        """Older twins take their kind's newest estimate where it changed since the last call; returns their
        ids (their holder of the old spec replaces it)."""
        out = set()
        for kind in self.dirty:
            twins, newest = self.members.get(kind), self.newest.get(kind)
            if twins is None or newest is None:
                continue
            for twin in twins if isinstance(twins, set) else (twins,):
                old = self.specs.get(twin)
                est_s = None if old is None else within_limit(newest[2], old.time_limit_s)
                if old is not None and twin != newest[1] and old.est_s != est_s:
                    self.specs[twin] = replace(old, est_s=est_s)
                    out.add(twin)
        self.dirty = set()
        return out

    def forget(self, job_id: str) -> None:
        """Drop one job's spec (it changed, or ended)."""
        self.specs.pop(job_id, None)
        kind = self.kinds.pop(job_id, None)
        if kind is None:
            return
        twins = self.members.get(kind)
        if isinstance(twins, set):
            twins.discard(job_id)
        if not twins or twins == job_id:
            del self.members[kind]
            self.newest.pop(kind, None)

    def keep_only(self, ids) -> None:
        ids = set(ids)
        for k in [k for k in self.specs if k not in ids]:
            self.forget(k)

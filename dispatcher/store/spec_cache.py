"""Job specs as the policy sees them, decoded once and kept across reads (specs are immutable; a changed
job's is dropped and read again).

The estimate the policy plans with is the job's plan_est_s (store/history.py: the user's estimate
corrected by their history, or the prediction from earlier runs of the same command), which submit
wrote from the history of that moment. Jobs of one kind (one history: user, command with its numbers
masked, GPU count and types; and the same estimate of their own, or none) share the newest one's: else a job submitted after earlier
copies of its command finished (its prediction says 2 minutes) ranks above its older twins (no
prediction then: 'unknown'), and identical jobs start newest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..core.errors import MalformedRecord
from ..core.predict import fingerprint
from .codec import decode_spec
from .history import plan_estimate


def kind_of(spec) -> tuple:
    """What makes two jobs twins for their estimate: one history (core/predict.py fingerprint: user,
    command with its numbers masked, GPU request), and the same estimate of the user's own."""
    return fingerprint(spec), spec.est_s


@dataclass
class SpecCache:
    specs: dict = field(default_factory=dict)
    #: kind -> (submit ms, job id, plan estimate) of the newest job of that kind with one
    newest: dict = field(default_factory=dict)
    #: kind -> (that kind, the ids of its jobs in `specs`); job id -> its kind
    members: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)
    #: ids whose cached spec took a newer twin's estimate since take_restamped
    restamped: set = field(default_factory=set)

    def get(self, job_id: str, raw, plan_est=None):
        """The job's spec as the policy sees it: est_s is its plan estimate, or its newest twin's. A local
        copy; the stored spec, which agents check signatures on, never changes."""
        spec = self.specs.get(job_id)
        if spec is None and raw is not None:
            spec = decode_spec(raw, key=f"job {job_id}")
            if spec.id != job_id:
                raise MalformedRecord(f"job {job_id}", f"its spec is for job {spec.id!r}")
            spec = self._planned(job_id, spec, plan_estimate(plan_est))
            self.specs[job_id] = spec
        return spec

    def _planned(self, job_id: str, spec, est_s):
        kind = kind_of(spec)
        entry = self.members.get(kind)
        if entry is None:
            entry = self.members[kind] = (kind, set())
        kind = entry[0]  # (one key object per kind, not per job)
        self.kinds[job_id] = kind
        entry[1].add(job_id)
        newest = self.newest.get(kind)
        mine = (spec.submit_ms, job_id)
        if est_s is not None and (newest is None or mine > newest[:2]):
            self.newest[kind] = (*mine, est_s)
            if newest is None or newest[2] != est_s:
                for twin in entry[1] - {job_id}:  # older twins take it
                    old = self.specs.get(twin)
                    if old is not None:
                        self.specs[twin] = replace(old, est_s=est_s)
                        self.restamped.add(twin)
        elif newest is not None and mine < newest[:2]:
            est_s = newest[2]
        return spec if est_s is None else replace(spec, est_s=est_s)

    def take_restamped(self) -> set[str]:
        """The ids whose spec took a newer twin's estimate since the last call (their holder of the old
        spec replaces it)."""
        out, self.restamped = self.restamped, set()
        return out

    def forget(self, job_id: str) -> None:
        """Drop one job's spec (it changed, or ended)."""
        self.specs.pop(job_id, None)
        kind = self.kinds.pop(job_id, None)
        if kind is None:
            return
        entry = self.members.get(kind)
        if entry is not None:
            entry[1].discard(job_id)
            if not entry[1]:
                del self.members[kind]
                self.newest.pop(kind, None)

    def keep_only(self, ids) -> None:
        ids = set(ids)
        for k in [k for k in self.specs if k not in ids]:
            self.forget(k)

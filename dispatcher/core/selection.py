"""Which jobs a filter means: `-u/--user`, `--state`, `--name` globs, `--team`, and ids with ranges
(`60-66`), as `squeue -u`/`scancel -u --state --name` take them. Pure: the one reading of a filter for
the CLI (cli/select.py: queue, cancel, wait, hold, ...) and the dashboard's search (views/search.py)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from .arrays import parse_array
from .errors import InvalidRequestError

#: States a filter may name: the job states, and the two groups users think in.
STATES = ("pending", "assigned", "running", "preempting", "succeeded", "failed", "cancelled")
STATE_GROUPS = {"active": ("pending", "assigned", "running", "preempting"),
                "done": ("succeeded", "failed", "cancelled"), "all": STATES}
#: The most ids one range may stand for (`1-1000000` is a typo, not a request).
MAX_RANGE = 100_000
_RANGE = re.compile(r"(\d+)-(\d+)", re.ASCII)
#: Elements of an array as queue shows them and scancel takes them: 12_[1-3,7] (a cap, %8, is ignored).
_ELEMENTS = re.compile(r"(\d+)_\[([^\]]*)\]", re.ASCII)
_OUTSIDE_BRACKETS = re.compile(r",(?![^\[]*\])")


def pieces(text: str) -> list[str]:
    """Comma-separated values, each stripped, empty ones kept (a comma inside brackets, as in an array's
    elements 12_[1,3], is the value's own)."""
    return [v.strip() for v in _OUTSIDE_BRACKETS.split(str(text))]


def split(values) -> tuple[str, ...]:
    """Repeated or comma-separated values (pieces), empty ones left out."""
    return tuple(v for item in values for v in pieces(item) if v)


@dataclass(frozen=True)
class Selection:
    ids: tuple[str, ...] = ()  # as given, ranges spelled out (resolve reads exactly these)
    users: tuple[str, ...] = ()
    states: frozenset[str] = frozenset()
    names: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()

    @property
    def filtered(self) -> bool:
        """Filters beyond ids were given."""
        return bool(self.users or self.states or self.names or self.teams)

    def matches(self, job: dict) -> bool:
        """Whether the job (a dict with user, state, team, name) passes the filters (the ids are resolve's)."""
        return ((not self.users or job["user"] in self.users)
                and (not self.states or job["state"] in self.states)
                and (not self.teams or job["team"] in self.teams)
                and (not self.names or any(fnmatch.fnmatchcase(job["name"] or "", g) for g in self.names)))


def expand_ids(args) -> list[str]:
    """Job ids as given, ranges `60-66` and an array's elements `12_[1-3,7]` spelled out, order kept, no repeats."""
    out: dict[str, None] = {}
    for arg in args:  # (a blank one is an unset variable's, `requeue "$JOB"`: never "every job")
        if not any(pieces(arg)):
            raise InvalidRequestError(f"an empty job id ({arg!r}); give job ids (7, 60-66, 12_[1-3])", field="JOB")
    for arg in split(args):
        elements = _ELEMENTS.fullmatch(arg)
        if elements:
            try:
                indices, _ = parse_array(elements.group(2))
            except InvalidRequestError:
                raise InvalidRequestError(f"{arg}: not elements of an array; give e.g. 12_[1-3,7] (as queue shows "
                                          "an array) or 12_5", field="JOB") from None
            out.update(dict.fromkeys(f"{elements.group(1)}_{i}" for i in indices))
            continue
        m = _RANGE.fullmatch(arg)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo or hi - lo >= MAX_RANGE:
                raise InvalidRequestError(f"{arg}: a range is LOW-HIGH with LOW <= HIGH and at most "
                                          f"{MAX_RANGE:,} ids", field="JOB")
            out.update(dict.fromkeys(map(str, range(lo, hi + 1))))
        else:
            out[arg] = None
    return list(out)


#: squeue's and sacct's state codes and names, as a Slurm user types them (-t PD, -t R, --state COMPLETED).
SLURM_STATES = {"pd": ("pending",), "r": ("assigned", "running"), "s": ("preempting",), "cd": ("succeeded",),
                "completed": ("succeeded",), "f": ("failed",), "ca": ("cancelled",), "canceled": ("cancelled",)}


def selection(ids=(), users=(), states=(), names=(), teams=()) -> Selection:
    for flag, values in (("--user", users), ("--state", states), ("--name", names), ("--team", teams)):
        if any(not v for item in values for v in pieces(item)):  # ('-u ""' matched nobody, '-t ""' everyone)
            raise InvalidRequestError(f"{flag}: an empty value; give one, or leave {flag} out", field=flag)
    wanted: set[str] = set()
    for s in split(states):
        s = s.lower()
        if s not in STATES and s not in STATE_GROUPS and s not in SLURM_STATES:
            raise InvalidRequestError(f"--state {s}: not a state; one of {', '.join(STATES)}, active, done, all "
                                      "(or Slurm's PD, R, S, CD, F, CA)", field="--state")
        wanted.update(STATE_GROUPS.get(s) or SLURM_STATES.get(s) or (s,))
    return Selection(tuple(expand_ids(ids)), split(users), frozenset(wanted), split(names), split(teams))

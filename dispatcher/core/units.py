"""Durations as text and text as durations: the one set of formatters every command, view and
policy text uses. Pure: seconds in, text out (no clock).

Each reads differently because each is read in a different place:

- `age`: how long ago, or how long something has waited, in a table cell or an alert: "45s",
  "12m", "3h05m" (`dispatch queue`, `dispatch top`, the alerts).
- `within`: when a forecast start comes: "now", "in ~40 s", "in ~35 min" (`dispatch eta`).
- `rough`: a predicted or measured run time, one decimal: "80.0s", "1.5m", "2.0h" (`dispatch show`).
- `span`: a threshold in words: "90s", "30m", "1h30m" (the idle warning and requeue reason).
- `exact`: a duration a policy file reads back to the same number: "90s", "90m", "6d"
  (`dispatch policy show`, the policy files and diffs).
- `hhmm`: a minute of the day: "08:00" (the policy schedule).

`parse_duration` reads what people type ("90s", "1h30m", a bare number of seconds) for every flag
and policy key that takes a duration; `parse_time_limit` reads --time, which also takes Slurm's forms
("30" minutes, "1:00:00", "2-12").
"""

from __future__ import annotations

import functools
import re

from .errors import InvalidRequestError

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: Largest first: `exact` writes the largest unit that divides a duration.
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def parse_duration(text: str, *, flag: str = "--est", zero: bool = False) -> float:
    """'90s', '15m', '2h', '1h30m', '1d' or a bare number of seconds -> seconds (> 0; or 0 too with `zero`)."""
    value = _seconds(str(text).strip().lower())
    if value is None:
        raise InvalidRequestError(f"{flag}: {text!r} is not a duration; use e.g. 90s, 15m, 2h or 1h30m", field=flag)
    if value == float("inf"):
        raise InvalidRequestError(f"{flag}: {text!r} is out of range (too long)", field=flag)
    if not (value > 0 or zero and value == 0):
        raise InvalidRequestError(f"{flag}: duration must be positive, got {text!r}", field=flag)
    return value


#: Slurm's --time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (whole numbers; the first unbounded,
#: as Slurm's own: 120:00 is two hours; a minute or second after a colon below 60).
_SLURM_TIME = re.compile(r"(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?")
_DECIMAL = re.compile(r"[0-9]+\.[0-9]*|\.[0-9]+")


def parse_estimate(text: str, *, flag: str = "--est") -> float:
    """An estimate as parse_duration reads it ('90s', '2h30m'; a bare number is seconds), or in Slurm's
    forms with a colon or a day ('1:00:00', '30:00', '2-12'), as --time takes them."""
    t = str(text).strip()
    return parse_time_limit(t, flag=flag) if (":" in t or "-" in t.lstrip("-")) and _SLURM_TIME.fullmatch(t) \
        else parse_duration(t, flag=flag)


def unlimited(value) -> bool:
    """--time's no limit at all, as Slurm's UNLIMITED (or INFINITE) says it (update: clears a limit)."""
    return isinstance(value, str) and value.strip().lower() in ("unlimited", "infinite", "none")


def parse_time_limit(text: str, *, flag: str = "--time") -> float:
    """A run-time limit as Slurm's --time takes it, or as parse_duration: '30' (a bare number is minutes,
    as Slurm's), '30:00' (MM:SS), '1:00:00' (HH:MM:SS), '2-12' (D-HH), '2-12:30' (D-HH:MM),
    '2-12:30:00' (D-HH:MM:SS), and '90s', '15m', '3h', '1d', '1h30m' -> seconds (> 0)."""
    t = str(text).strip()
    m = _SLURM_TIME.fullmatch(t)
    if m is not None:
        days, parts = m.group(1), [int(p[-300:]) if p.lstrip("0")[300:] == "" else 10**300  # (no 5000-digit int)
                                   for p in m.group(2, 3, 4) if p is not None]
        if any(p >= 60 for p in parts[1:]):
            raise InvalidRequestError(f"{flag}: {text!r}: a minute or second after a colon is 0 to 59 (Slurm's "
                                      f"MM:SS, HH:MM:SS; 1:30 is 90 seconds)", field=flag)
        if days is None:  # MM, MM:SS, HH:MM:SS
            h, mi, s = [0, parts[0], 0] if len(parts) == 1 else [0, *parts] if len(parts) == 2 else parts
        else:  # D-HH, D-HH:MM, D-HH:MM:SS
            h, mi, s = (parts + [0, 0])[:3]
            h += 24 * int(days)
        total = h * 3600 + mi * 60 + s
        value = float(total) if total < 10**300 else float("inf")  # (the caller's bound refuses it)
    elif _DECIMAL.fullmatch(t):
        value = float(t) * 60  # a bare number of minutes, with a fraction
    elif _seconds(t.lower()) is None or not _DURATION_PART.match(t.lower()):
        raise InvalidRequestError(f"{flag}: {text!r} is not a duration; use e.g. 90s, 15m, 2h or 1h30m, or "
                                  f"Slurm's 30 (minutes), 1:00:00 or 2-12:00", field=flag)
    else:
        return parse_duration(t, flag=flag)
    if not value > 0:  # (Slurm's --time 0 is no limit: here that is UNLIMITED, or no --time)
        raise InvalidRequestError(f"{flag}: duration must be positive, got {text!r}"
                                  + ("; no limit is UNLIMITED (or no --time)" if flag == "--time" else ""), field=flag)
    return value


@functools.lru_cache(maxsize=4096)  # a sweep repeats a few durations thousands of times
def _seconds(t: str) -> float | None:
    """Seconds that `t` says (digits in ASCII; each unit once, largest first: 1h30m, not 1h1h), or None."""
    if not t.isascii():
        return None
    try:
        return float(t)
    except ValueError:
        parts = _DURATION_PART.findall(t)
        units = [u for _, u in parts]
        if not parts or "".join(n + u for n, u in parts) != t or units != sorted(set(units), key="dhms".index):
            return None
        return sum(float(n) * _UNIT_S[u] for n, u in parts)


def age(seconds: float | None) -> str:
    """'45s' under 2 minutes, '12m' under 2 hours, then '3h05m'; '-' for None (never seen), and a
    negative age (clocks that disagree) reads as 0s."""
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def within(in_s: float) -> str:
    """'now', 'in ~40 s', 'in ~35 min', 'in ~3 h 20 min', 'in ~2 d 4 h'."""
    s = int(round(in_s))
    if s <= 0:
        return "now"
    if s < 120:
        return f"in ~{s} s"
    if s < 3 * 3600:
        return f"in ~{round(s / 60)} min"
    if s < 2 * 86400:
        return f"in ~{s // 3600} h {s % 3600 // 60} min"
    return f"in ~{s // 86400} d {s % 86400 // 3600} h"


def rough(seconds: float) -> str:
    """'80.0s' under 2 minutes, '1.5m' under 2 hours, then '2.0h'."""
    s = float(seconds)
    if s < 120:
        return f"{s:.1f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def span(seconds: float) -> str:
    """A threshold in words: '90s', '30m', '2h', '1h30m' (whole minutes from 2 minutes on)."""
    s = int(round(seconds))
    if s < 120 and s % 60:
        return f"{s}s"
    h, m = divmod(s // 60, 60)
    return f"{h}h{m:02d}m" if h and m else f"{h}h" if h else f"{m}m"


def exact(seconds: float) -> str:
    """Seconds as a duration `parse_duration` reads back exactly: '90s', '2h', '6d'; '0s' for 0; a
    fraction of a second as the bare number ('1.5')."""
    if seconds == 0:
        return "0s"
    if not float(seconds).is_integer():
        return repr(float(seconds))
    s = int(seconds)
    for unit, size in _UNITS:
        if s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"  # pragma: no cover - size 1 always divides


def hhmm(minute: int) -> str:
    """A minute of the day (0..1440) as 'HH:MM'."""
    return f"{minute // 60:02d}:{minute % 60:02d}"


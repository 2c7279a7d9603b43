"""--begin: the earliest a job may start (Slurm's sbatch --begin), from the text people type to an instant.
Local time, so not in the pure core: submit and the Python API resolve the text here, and the spec
(core/spec.py) only ever holds the instant.

The forms Slurm users type, read in the local time zone:

- `now+90` (seconds, as Slurm's), `now+30minutes`, `now+2hours`, `now+1day`, `now+1h30m`;
- `16:00` or `16:00:30`: the next such time (today, or tomorrow once it has passed);
- `2026-12-24`, `2026-12-24T09:00`, `2026-12-24 09:00:30`;
- `midnight`, `noon` (the next one), `today` (now), `tomorrow` (the coming midnight).

A time already past is no wait. A request gives the text; the job's record keeps the instant it named
(`JobSpec.begin_ms`), resolved against the submit time once, so a template shared by a sweep's jobs
(core/spec.py) never carries a relative time.
"""

from __future__ import annotations

import datetime as dt
import re
import time

from .core.errors import InvalidRequestError
from .core.units import parse_duration

_NOW = re.compile(r"now(?:\s*\+\s*(.+))?")
_COUNT = re.compile(r"([0-9]+)\s*([a-z]*)")
_WORDS = {"": "s", "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s", "m": "m", "min": "m",
          "mins": "m", "minute": "m", "minutes": "m", "h": "h", "hour": "h", "hours": "h", "d": "d", "day": "d",
          "days": "d", "w": "w", "week": "w", "weeks": "w"}
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?")
#: Further than this is a typo (a year of 20266), not a plan.
MAX_AHEAD_S = 10 * 366 * 86400
FLAG = "--begin"


def parse_begin(text, now_ms: int, *, flag: str = FLAG) -> int:
    """The instant (ms since the epoch) that `text` names, read at `now_ms`; InvalidRequestError if none."""
    if not isinstance(text, str):
        raise InvalidRequestError(f"{flag}: give a time as text, e.g. now+1hour, 16:00 or 2026-12-24T09:00",
                                  field=flag)
    t = text.strip().lower()
    now = dt.datetime.fromtimestamp(now_ms / 1000)
    at = _relative(t, now_ms, flag) if t.startswith("now") else _named(t, now)
    if at is None:
        raise InvalidRequestError(f"{flag}: {text!r} is not a time; use e.g. now+1hour, now+90 (seconds), 16:00, "
                                  "2026-12-24T09:00, midnight or tomorrow", field=flag)
    if at - now_ms > MAX_AHEAD_S * 1000:
        raise InvalidRequestError(f"{flag}: {text!r} is more than ten years ahead", field=flag)
    return max(0, at)


def _relative(t: str, now_ms: int, flag: str) -> int | None:
    m = _NOW.fullmatch(t)
    if m is None:
        return None
    if m.group(1) is None:
        return now_ms
    after = m.group(1).strip()
    count = _COUNT.fullmatch(after)
    if count is not None and count.group(2) in _WORDS:
        seconds = int(count.group(1)[-12:]) * _UNIT_S[_WORDS[count.group(2)]] if len(count.group(1)) <= 12 \
            else MAX_AHEAD_S + 1
    else:
        seconds = parse_duration(after, flag=flag)  # 1h30m
    return now_ms + int(min(seconds, MAX_AHEAD_S + 1) * 1000)


def _named(t: str, now: dt.datetime) -> int | None:
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    words = {"today": now, "tomorrow": midnight + dt.timedelta(days=1), "midnight": midnight + dt.timedelta(days=1),
             "noon": _next(midnight.replace(hour=12), now)}
    if t in words:
        return _ms(words[t])
    m = _CLOCK.fullmatch(t)
    if m is not None:
        h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if h > 23 or mi > 59 or s > 59:
            return None
        return _ms(_next(midnight.replace(hour=h, minute=mi, second=s), now))
    try:
        return _ms(dt.datetime.fromisoformat(t.replace(" ", "T", 1).upper()))
    except (ValueError, OverflowError):
        return None


def _next(today_at: dt.datetime, now: dt.datetime) -> dt.datetime:
    """That time of day today, or tomorrow once it has passed (as Slurm's HH:MM)."""
    return today_at if today_at > now else today_at + dt.timedelta(days=1)


def _ms(when: dt.datetime) -> int:
    if when.tzinfo is None:
        return int(time.mktime(when.timetuple()) * 1000) + when.microsecond // 1000
    return int(when.timestamp() * 1000)


def resolved(request: dict, submit_ms: int) -> dict:
    """A request (core/spec.py REQUEST_FIELDS) with its --begin text as the instant it names at `submit_ms`
    (ms); a number is refused (seconds or milliseconds? no instant it could mean for sure)."""
    begin = request.get("begin") if isinstance(request, dict) else None
    return request if begin is None else {**request, "begin": parse_begin(begin, submit_ms)}


def waits_for(begin_ms: int) -> str:
    """A job's reason while its --begin time has not come."""
    return f"waits for its start time, {when(begin_ms)} (--begin)"


def when(begin_ms: int) -> str:
    """The instant as people read it in a reason: '2026-12-24 09:00:00'."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(begin_ms / 1000))

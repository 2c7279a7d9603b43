"""The edges of an accounting window (report, history, tune): a duration ago, or a date as sacct's users
give one."""

from __future__ import annotations

import re

from ..core.errors import InvalidRequestError
from ..core.units import parse_duration


_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?)?")


def seconds_ago(text: str, now: float, *, flag: str) -> float:
    """How long before `now` (epoch seconds) a window's edge is: a duration ('7d', '12h': that long ago)
    or a local date or time as sacct's users give one ('2026-12-01', '2026-12-01T09:30', '2026-12-01 09:30:15';
    a time to come is 0 s ago)."""
    import datetime

    m = _DATE.fullmatch(str(text).strip())
    if m is None:
        return parse_duration(text, flag=flag)
    try:
        at = datetime.datetime(*(int(g) for g in m.groups() if g is not None)).timestamp()
    except (ValueError, OverflowError) as e:
        raise InvalidRequestError(f"{flag}: {text!r} is not a date ({e})", field=flag) from None
    return max(0.0, now - at)

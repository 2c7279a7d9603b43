"""--begin's times as Slurm users type them (dispatcher/begin.py), read in the local time zone against a fixed now,
and the instant a spec keeps through its record."""

import os
import time

import pytest

from dispatcher.begin import parse_begin, resolved, when
from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.spec import build_spec, spec_from_request
from dispatcher.store.codec import decode_spec, encode_spec


@pytest.fixture(autouse=True)
def berlin():
    """A zone with daylight saving, so that local times are not UTC by accident."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def local_ms(text: str) -> int:
    return int(time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S")) * 1000)


NOW = "2026-12-07 10:30:00"


@pytest.mark.parametrize("text, then", [
    ("now", NOW), ("now+90", "2026-12-07 10:31:30"), ("now+30minutes", "2026-12-07 11:00:00"),
    ("now + 2 hours", "2026-12-07 12:30:00"), ("now+1day", "2026-12-08 10:30:00"), ("now+1h30m", "2026-12-07 12:00:00"),
    ("16:00", "2026-12-07 16:00:00"), ("09:15", "2026-12-08 09:15:00"),  # passed today: tomorrow, as Slurm's
    ("2026-12-24", "2026-12-24 00:00:00"), ("2026-12-24T09:00", "2026-12-24 09:00:00"),
    ("2026-12-24 09:00:30", "2026-12-24 09:00:30"), ("midnight", "2026-12-08 00:00:00"), ("noon", "2026-12-07 12:00:00"),
    ("tomorrow", "2026-12-08 00:00:00"), ("TODAY", NOW), ("2026-01-01", "2026-01-01 00:00:00"),  # past: no wait
])
def test_begin_reads_slurms_forms_in_local_time(text, then):
    assert parse_begin(text, local_ms(NOW)) == local_ms(then)
    assert when(local_ms(then)) == then


@pytest.mark.parametrize("text", ["soon", "", "25:00", "12:61", "now+", "now+x", "now-5", "2026-13-01", "now+20000days",
                                  "99999-01-01", 5])
def test_a_begin_that_names_no_time_is_refused_naming_the_flag(text):
    with pytest.raises(InvalidRequestError, match="--begin"):
        parse_begin(text, local_ms(NOW))


def test_the_record_keeps_the_instant_resolved_at_submit_not_the_text():
    now = local_ms(NOW)
    def submitted(at_ms: int, **request):
        return spec_from_request(resolved({"command": ["true"], **request}, at_ms), user="ada", submit_ms=at_ms, cwd="/")

    spec = submitted(now, begin="now+1h")
    again = submitted(now + 60_000, begin="now+1h")  # the same text, a minute later
    assert (spec.begin_ms, again.begin_ms) == (now + 3_600_000, now + 3_660_000)
    assert decode_spec(encode_spec(spec)) == spec and decode_spec(encode_spec(spec)).begin_ms == now + 3_600_000
    assert build_spec(command=["true"], user="ada", submit_ms=now).begin_ms == 0
    assert submitted(now, begin="16:00").begin_ms == local_ms("2026-12-07 16:00:00")
    with pytest.raises(InvalidRequestError, match="--begin"):  # a number from outside is no instant it could mean
        submitted(now, begin=1700000000)


def test_update_takes_the_instant_as_the_digits_a_signed_request_carries():
    from dispatcher.core.updates import amended

    spec = build_spec(command=["true"], user="ada", submit_ms=local_ms(NOW))
    later = local_ms("2026-12-07 16:00:00")
    assert amended(spec, {"begin": str(later)}).begin_ms == later
    with pytest.raises(InvalidRequestError, match="--begin"):
        amended(spec, {"begin": "16:00"})  # the text is read before (dispatcher/begin.py), never here

"""Policy files: the preemption mode and the LAS tiers, and one clear error for a bad value."""

from __future__ import annotations

import pytest

from dispatcher.core.errors import ConfigError
from dispatcher.policy.config import PolicyConfig
from dispatcher.policy.profiles import parse_policy


def test_the_shipped_example_parses_and_keeps_within_class_preemption():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "examples" / "policy.toml").read_text()
    day = parse_policy(text).profiles["day"]
    assert day.preempt_by == "class+attained" and day.las_thresholds_gpu_s == (3600.0, 36000.0)


def test_a_lab_can_turn_within_class_preemption_off_and_move_the_tiers():
    pset = parse_policy('[profiles.default]\npreempt_by = "class"\nlas_tiers = ["30m", "5h", "2d"]\n')
    cfg = pset.profiles["default"]
    assert cfg.preempt_by == "class" and cfg.las_thresholds_gpu_s == (1800.0, 18000.0, 172800.0)
    assert PolicyConfig().preempt_by == "class+attained"  # the default is untouched


@pytest.mark.parametrize("text, needle", [
    ('[profiles.default]\npreempt_by = "oldest"\n', "preempt_by"),
    ('[profiles.default]\nlas_tiers = ["10h", "1h"]\n', "increasing"),
    ('[profiles.default]\nlas_tiers = "1h"\n', "list"),
    # nan compares false with every bound: a nan weight made every score nan and the live scheduler spin
    ('[defaults]\nweights = { priority = nan }\n', "finite"),
    ('[defaults]\naging_cap = inf\n', "finite"),
    ('[defaults]\nmin_run = nan\n', "finite"),
    ('[defaults]\nremaining_ref = "0s"\n', "above 0"),
    # weights near the float limit passed, then made scores inf / inf = nan: the low job ranked first
    ('[defaults]\nweights = { priority = 1e308, remaining = 1e308 }\n', "at most 1e+06"),
    ('[defaults]\nclass_step = 1e300\n', "at most 1e+06"),
], ids=["unknown-mode", "tiers-out-of-order", "tiers-not-a-list", "nan-weight", "inf-cap", "nan-duration",
        "zero-remaining-ref", "huge-weights", "huge-class-step"])
def test_a_bad_setting_is_one_clear_error(text, needle):
    with pytest.raises(ConfigError) as e:
        parse_policy(text)
    assert needle in str(e.value)


def test_policy_check_names_the_days_of_a_schedule_rule():
    # the example's weekend rule read "night from 00:00 to 24:00": all day, every day
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
    out = subprocess.run([sys.executable, "-m", "dispatcher", "policy", "check", str(example)], capture_output=True,
                         text=True, timeout=60).stdout
    assert "schedule: night 00:00-24:00 sat,sun" in out and "schedule: night 20:00-08:00 every day" in out, out


def schedule(*windows) -> str:
    """A policy of two profiles and these (profile, from, to, days line) windows."""
    return '[profiles.day]\n[profiles.night]\n' + "".join(
        f'[[schedule]]\nprofile = "{p}"\nfrom = "{a}"\nto = "{b}"\n{days}\n' for p, a, b, days in windows)


@pytest.mark.parametrize("windows, needle", [
    ([("day", "08:00", "08:00", "")], "schedule[0]: from and to are both 08:00: the window is empty"),
    ([("day", "08:00", "20:00", "days = []")], "schedule[0].days: is empty: the window would never apply"),
    ([("day", "00:00", "24:00", ""), ("night", "00:30", "02:00", "")], "schedule[1]: never applies: the windows"),
    ([("night", "20:00", "08:00", 'days = ["fri"]'), ("day", "00:30", "02:00", 'days = ["sat"]')],
     "schedule[1]: never applies"),  # Friday's night wraps into Saturday
], ids=["from-equals-to", "no-days", "covered-by-an-all-day-window", "covered-by-a-wrap"])
def test_a_schedule_window_that_could_never_apply_is_refused(windows, needle):
    with pytest.raises(ConfigError) as e:
        parse_policy(schedule(*windows))
    assert needle in str(e.value), str(e.value)


def test_windows_that_overlap_in_part_are_kept_and_the_first_that_matches_wins():
    pset = parse_policy(schedule(("night", "20:00", "08:00", ""), ("day", "06:00", "22:00", "")))
    assert pset.config_at(0, 7 * 60)[0] == "night" and pset.config_at(0, 12 * 60)[0] == "day"

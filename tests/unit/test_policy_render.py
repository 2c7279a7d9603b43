"""Policy files written back: parse(render(x)) == x, and two policies' differences, row by row."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from dispatcher.core.errors import ConfigError
from dispatcher.core.units import exact as duration
from dispatcher.policy.config import PolicyConfig, TeamQuota
from dispatcher.policy.profiles import PREEMPT_BY, PolicySet, ScheduleEntry, parse_policy
from dispatcher.policy.render import diff_policies, file_key, render_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
#: The settings a policy file cannot hold (the simulator's and tests' own knobs).
NOT_IN_FILES = {"head_of_line", "gang_across_nodes", "hold_unknown_starts"}  # (the baselines')


def _changed(name: str, value):
    """A valid value different from `value`, for any PolicyConfig field (a new field fails here first)."""
    if name == "teams":
        return {"vision": TeamQuota(2, 4), "nlp team": TeamQuota(1, None)}
    if name == "preempt_by":
        return next(p for p in PREEMPT_BY if p != value)
    if name in ("aging_cap", "idle_util_pct"):
        return value / 2 + 1.5  # both at most 100
    if name == "idle_requeue_s":
        return 3 * 3600.0 if value is None else None
    if name == "reserve_longest_wait":
        return 0.25 if value is None else None
    if name == "las_thresholds_gpu_s":
        return (1800.0, 7200.0, 90_000.5)
    if name == "reserve":
        return {"high": 2, "critical": 1}
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 7 if value else 12_345.0
    if isinstance(value, dict):
        return {k: v * 3 + 0.25 for k, v in value.items()}
    raise AssertionError(f"PolicyConfig.{name}: teach _changed how to change a {type(value).__name__}")


def every_knob_changed() -> PolicyConfig:
    base = PolicyConfig()
    return replace(base, **{f.name: _changed(f.name, getattr(base, f.name)) for f in fields(base)
                            if f.name not in NOT_IN_FILES})


def roundtrip(pset: PolicySet) -> PolicySet:
    return parse_policy(render_policy(pset))


def test_the_built_in_defaults_come_back_equal():
    assert roundtrip(PolicySet()) == PolicySet()


def test_the_shipped_example_comes_back_equal():
    pset = parse_policy(EXAMPLE.read_text())
    assert roundtrip(pset) == pset


def test_a_config_with_every_knob_changed_comes_back_equal_alone_and_as_one_profile_of_several():
    cfg = every_knob_changed()
    for f in fields(cfg):
        if f.name not in NOT_IN_FILES:
            assert getattr(cfg, f.name) != getattr(PolicyConfig(), f.name), f.name
    alone = PolicySet({"default": cfg})
    assert roundtrip(alone) == alone
    night = replace(cfg, weights={**cfg.weights, "wait": 0.5}, reservations=0, preemption=True)
    several = PolicySet({"day": cfg, "night": night}, "night",
                        (ScheduleEntry("day", 8 * 60, 20 * 60, frozenset({0, 1, 2, 3, 4})),
                         ScheduleEntry("day", 22 * 60, 60)))
    assert roundtrip(several) == several


def test_every_knob_a_file_can_set_has_a_key_and_the_others_are_named_here():
    missing = [f.name for f in fields(PolicyConfig()) if f.name != "teams" and file_key(f.name) is None]
    assert sorted(missing) == sorted(NOT_IN_FILES)


def test_durations_are_written_in_the_parsers_own_units_and_never_for_no_idle_requeue():
    assert [duration(s) for s in (90, 7200, 5400, 6 * 86400, 0, 1.5)] == ["90s", "2h", "90m", "6d", "0s", "1.5"]
    text = render_policy(parse_policy('[defaults]\nidle_requeue = "2h"\naging_horizon = "90s"\n'))
    assert 'idle_requeue = "2h"' in text and 'aging_horizon = "90s"' in text
    back = render_policy(PolicySet({"default": replace(PolicyConfig(), idle_warn_s=60.0)}))
    assert "idle_requeue" not in back  # None is the default: not written
    on = PolicySet({"a": replace(PolicyConfig(), idle_requeue_s=7200.0), "b": PolicyConfig()}, "a")
    assert 'idle_requeue = "never"' in render_policy(on)  # b turns off what a (the defaults) turned on
    assert roundtrip(on) == on


def test_a_setting_no_policy_file_can_hold_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        render_policy(PolicySet({"default": replace(PolicyConfig(), head_of_line=True)}))
    assert e.value.key == "defaults.head_of_line"


def test_diff_lists_one_row_per_differing_setting_and_nothing_for_equal_policies():
    a = parse_policy('[defaults]\nweights = { wait = 0.12 }\nstarvation = { low = "2d" }\n[teams.vision]\nlimit_gpus = 8\n')
    b = parse_policy('[defaults]\nweights = { wait = 0.3 }\npreempt_by = "class"\n[teams.vision]\nlimit_gpus = 4\n')
    assert diff_policies(a, a) == [] and diff_policies(PolicySet(), roundtrip(PolicySet())) == []
    assert diff_policies(a, b) == [  # in PolicyConfig's field order, then teams
        ("profiles.default.weights.wait", "0.12", "0.3"),
        ("profiles.default.starvation.low", "2d", "6d"),
        ("profiles.default.preempt_by", "class+attained", "class"),
        ("teams.vision.limit_gpus", "8", "4"),
    ]


def test_diff_lists_the_alert_thresholds_that_differ():
    """[alerts] is part of the policy (every view's alerts fire by it): a file that changes only its
    thresholds was "no differences"."""
    changed = parse_policy('[alerts]\ncritical_wait = "30s"\nhigh_wait = "1m"\nlow_util = 10\n')
    assert diff_policies(PolicySet(), changed) == [("alerts.critical_wait", "10m", "30s"),
                                                   ("alerts.high_wait", "30m", "1m"),
                                                   ("alerts.low_util", "50.0", "10.0")]
    assert diff_policies(changed, changed) == []
    assert roundtrip(changed) == changed  # (render_policy wrote no [alerts]: it could not write this one)


def test_diff_reads_a_profile_one_side_lacks_as_that_sides_default_profile():
    example = parse_policy(EXAMPLE.read_text())
    rows = {r[0]: r[1:] for r in diff_policies(PolicySet(), example)}
    assert rows["default_profile"] == ("default", "day")
    assert rows["profiles.night.weights.fairness"] == ("0.005", "0.08")
    assert "profiles.day.weights.fairness" not in rows  # the example's day profile is the built-in weights
    assert rows["schedule[1]"] == ("-", "night 00:00-24:00 sat,sun")


@pytest.mark.parametrize("name", [f.name for f in fields(PolicyConfig()) if f.name not in NOT_IN_FILES])
def test_each_knob_changed_alone_comes_back_equal_even_where_the_parser_derives_another_from_it(name):
    cfg = replace(PolicyConfig(), **{name: _changed(name, getattr(PolicyConfig(), name))})
    for pset in (PolicySet({"default": cfg}), PolicySet({"day": PolicyConfig(teams=cfg.teams), "night": cfg}, "day")):
        assert roundtrip(pset) == pset

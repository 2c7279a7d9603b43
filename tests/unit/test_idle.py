"""The idle-GPU rule (dispatcher/policy/idle.py), its policy keys, and the fake probe's busy GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from dispatcher.core.errors import ConfigError
from dispatcher.core.units import span
from dispatcher.policy.config import PolicyConfig
from dispatcher.policy.idle import (BUSY, IDLE, REQUEUE, WARN, IdleClock, idle_action, job_idle, requeue_reason,
                                    warning_text)
from dispatcher.policy.profiles import parse_policy
from workers.gpu import FAKE_UTIL_VAR, FakeProbe


@pytest.mark.parametrize("util,gpus,want", [
    ({0: 0.0, 1: 4.9}, (0, 1), True),
    ({0: 0.0, 1: 90.0}, (0, 1), False),
    ({0: 0.0, 1: 90.0}, (0,), True),       # only the job's own GPUs count
    ({0: 5.0}, (0,), False),               # at the threshold is busy: below it is idle
    ({0: 0.0}, (0, 1), False),             # GPU 1 missing from the sample: never judged idle
    ({0: 0.0}, (), False),                 # a CPU-only job holds no GPU to idle
], ids=["all_below", "one_busy", "other_jobs_gpu_busy", "at_threshold", "gpu_missing", "no_gpus"])
def test_a_job_is_idle_only_when_every_gpu_it_holds_is_below_the_threshold(util, gpus, want):
    assert job_idle(util, gpus, 5.0) is want


WARN_REQUEUE = replace(PolicyConfig(), idle_warn_s=1800.0, idle_requeue_s=7200.0)


@pytest.mark.parametrize("idle_s,config,want", [
    (None, WARN_REQUEUE, BUSY),
    (0.0, WARN_REQUEUE, IDLE),
    (1799.9, WARN_REQUEUE, IDLE),
    (1800.0, WARN_REQUEUE, WARN),
    (7199.0, WARN_REQUEUE, WARN),
    (7200.0, WARN_REQUEUE, REQUEUE),
    (1e9, PolicyConfig(), WARN),           # the default never requeues
], ids=["busy", "spell_starts", "before_warn", "at_warn", "before_requeue", "at_requeue", "default_never_requeues"])
def test_the_idle_action_follows_the_spell_length(idle_s, config, want):
    assert idle_action(idle_s, config) == want


def test_a_spell_lasts_while_samples_stay_idle_and_ends_at_one_busy_sample():
    clock = IdleClock(max_gap_s=10.0)
    assert [clock.observe("a", True, t) for t in (100.0, 101.0, 103.5)] == [0.0, 1.0, 3.5]
    assert clock.observe("a", False, 104.0) is None
    assert clock.observe("a", True, 105.0) == 0.0  # a new spell
    assert clock.observe("b", True, 105.0) == 0.0  # spells are per key (a job's attempt)


def test_a_gap_in_the_samples_starts_the_spell_again():
    clock = IdleClock(max_gap_s=10.0)
    clock.observe("a", True, 0.0)
    assert clock.observe("a", True, 9.0) == 9.0
    assert clock.observe("a", True, 30.0) == 0.0  # 21 s without a sample: nothing is known of them
    assert clock.observe("a", True, 20.0) == 0.0  # a clock that went back, too


def test_forgotten_keys_lose_their_spell():
    clock = IdleClock(max_gap_s=10.0)
    clock.observe("a", True, 0.0)
    clock.observe("b", True, 0.0)
    clock.keep_only({"b"})
    assert clock.observe("a", True, 1.0) == 0.0 and clock.observe("b", True, 1.0) == 1.0


@pytest.mark.parametrize("seconds,want", [(4, "4s"), (90, "90s"), (120, "2m"), (1800, "30m"), (7200, "2h"),
                                          (5400, "1h30m")], ids=["4s", "90s", "2m", "30m", "2h", "1h30m"])
def test_thresholds_read_as_short_durations(seconds, want):
    assert span(seconds) == want


def test_the_texts_say_the_thresholds_and_what_comes_next():
    assert requeue_reason(WARN_REQUEUE) == "idle: GPUs below 5% for 2h"
    assert warning_text(WARN_REQUEUE) == ("GPUs idle: all below 5% utilization for 30m; "
                                          "the policy requeues the job after 2h idle")
    assert warning_text(PolicyConfig()) == "GPUs idle: all below 5% utilization for 30m"


def test_the_policy_file_sets_the_idle_thresholds_per_profile():
    p = parse_policy('[defaults]\nidle_warn = "20m"\nidle_requeue = "2h"\nidle_util = 10\n'
                     '[profiles.day]\n[profiles.night]\nidle_requeue = "never"\n')
    day, night = p.profiles["day"], p.profiles["night"]
    assert (day.idle_warn_s, day.idle_requeue_s, day.idle_util_pct) == (1200.0, 7200.0, 10.0)
    assert (night.idle_warn_s, night.idle_requeue_s) == (1200.0, None)
    default = parse_policy("").profiles["default"]
    assert (default.idle_warn_s, default.idle_requeue_s, default.idle_util_pct) == (1800.0, None, 5.0)


@pytest.mark.parametrize("text,key", [
    ('[defaults]\nidle_warn = "1h"\nidle_requeue = "30m"\n', "defaults.idle_requeue"),
    ('[defaults]\nidle_requeue = "soon"\n', "defaults.idle_requeue"),
    ('[defaults]\nidle_requeue = "0s"\n', "defaults.idle_requeue"),
    ('[defaults]\nidle_util = 150\n', "defaults.idle_util"),
    ('[defaults]\nidle_util = "5%"\n', "defaults.idle_util"),
    ('[profiles.p]\nidle_warn = -1\n', "profiles.p.idle_warn"),
], ids=["requeue_before_warn", "not_a_duration", "zero", "over_100", "not_a_number", "negative"])
def test_bad_idle_settings_name_their_key(text, key):
    with pytest.raises(ConfigError) as e:
        parse_policy(text)
    assert e.value.key == key


def test_a_fake_jobs_gpus_report_the_utilization_its_environment_gives():
    env = dict(os.environ, DISPATCH_NODE="utilnode", CUDA_VISIBLE_DEVICES="1", **{FAKE_UTIL_VAR: "90"})
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, start_new_session=True)
    bad = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                           env={**env, "CUDA_VISIBLE_DEVICES": "2", FAKE_UTIL_VAR: "lots"}, start_new_session=True)
    try:
        probe = FakeProbe("3xA100-40GB", "utilnode")
        deadline = time.monotonic() + 10
        while len(probe.processes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [g.util_pct for g in probe.gpus()] == [0.0, 90.0, 0.0]  # GPU 2's value is no number: 0
    finally:
        for p in (busy, bad):
            os.killpg(p.pid, 9)
            p.wait()

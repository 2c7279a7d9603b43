"""The words the views share for one thing: where a decision put a job, and when a reservation starts."""

from dispatcher.core.units import within
from dispatcher.store.decisions import placed_on


def test_a_job_of_no_gpus_is_placed_on_its_node_not_on_an_empty_gpu_list():
    assert placed_on({"node": "zeta", "gpus": [0, 3]}) == "zeta:0,3"
    assert placed_on({"node": "alpha", "gpus": []}) == "alpha (no GPUs)"  # was "alpha:"


def test_a_reservation_start_reads_as_eta_says_it_in_why_and_the_reasons():
    # why's reservation line and the policy's reasons said "~23h59m" and "~86400s from now", eta "in ~24 h 0 min"
    assert within(86_340) == "in ~23 h 59 min" and within(100) == "in ~100 s"


def test_a_table_lines_up_wide_letters_by_the_columns_a_terminal_gives_them():
    from dispatcher.cli.columns import table

    lines = table([["1", "日本語名", "x"], ["2", "ab", "y"]], ["ID", "NAME", "C"]).splitlines()
    assert lines == ["ID  NAME      C", "1   日本語名  x", "2   ab        y"]  # (each CJK letter is two columns)


def test_a_table_escapes_control_characters_a_job_brought_in():
    # a command with a NUL, a name that rang the bell and cleared the screen: printed raw (grep saw binary)
    from dispatcher.cli.columns import table

    out = table([["7", "a\x07b", "tr\x00ue \x1b[2J\x9b"]], ["ID", "NAME", "COMMAND"])
    assert out.splitlines()[1] == "7   a\\x07b  tr\\x00ue \\x1b[2J\\x9b", out
    assert all(ch.isprintable() for ch in out.replace("\n", "")), out
    assert table([["x\u202eabc\u200b"]], ["C"]).splitlines()[1] == "x\\u202eabc\\u200b"  # (reordered what followed)


def test_eta_calls_an_end_a_guess_only_where_the_overrun_rule_not_the_time_limit_gives_it():
    # `--est 5s --time 40s --grace 0s`, 21 s in: its --time ends it in 19 s, which eta said was "a guess ...
    # as much again as it overran, at least a minute"
    from dispatcher.views.forecast import _limit_first
    from tests.builders import NOW_MS, make_job

    r = make_job("R").est(5)._set(time_limit_s=40.0, grace_s=0.0).running_on("n1", 0, started_s_ago=21)
    assert _limit_first(r, NOW_MS)
    assert not _limit_first(make_job("S").est(5)._set(time_limit_s=3600.0).running_on("n1", 0, started_s_ago=21), NOW_MS)

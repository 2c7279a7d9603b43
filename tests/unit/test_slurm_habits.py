"""What a Slurm user types and reads: squeue's state codes in filters, an empty filter value as an error
naming its flag (`-u ''` matched nobody and `-t ''` everybody: a typo went unnoticed either way), one job
asked for where several are named, reasons in words, and exit codes as the shell says them."""

import pytest

from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.selection import selection


@pytest.mark.parametrize("given,means", [
    ("PD", {"pending"}), ("R", {"assigned", "running"}), ("pd,r", {"pending", "assigned", "running"}),
    ("CD", {"succeeded"}), ("COMPLETED", {"succeeded"}), ("F", {"failed"}), ("CA", {"cancelled"}),
    ("canceled", {"cancelled"}), ("S", {"preempting"}), ("RUNNING", {"running"}),
])
def test_squeue_state_codes_and_names_mean_our_states(given, means):
    assert selection(states=[given]).states == means


@pytest.mark.parametrize("kw,flag", [({"users": [""]}, "--user"), ({"states": [""]}, "--state"),
                                     ({"names": ["a,"]}, "--name"), ({"teams": ["  "]}, "--team")])
def test_an_empty_filter_value_is_one_line_naming_its_flag(kw, flag):
    with pytest.raises(InvalidRequestError) as e:
        selection(**kw)
    assert e.value.field == flag and str(e.value) == f"{flag}: an empty value; give one, or leave {flag} out"


def test_an_unknown_state_names_the_slurm_codes_too():
    with pytest.raises(InvalidRequestError, match=r"--state sleeping: not a state; .*Slurm's PD, R, S, CD, F, CA"):
        selection(states=["sleeping"])


@pytest.mark.parametrize("given", ["3-7", "55_[0-1]", "3,4"])
def test_a_command_on_one_job_given_several_says_so_not_that_no_such_job_exists(given):
    from dispatcher.store.naming import record_id

    with pytest.raises(InvalidRequestError, match="names several jobs; this command takes one"):
        record_id(None, "ns", given)  # (refused before any read)


def test_the_reason_of_jobs_a_cycle_did_not_reach_counts_in_words():
    from dispatcher.policy.verdicts import rest_reason

    assert rest_reason(0, 1) == "no node has room for it this cycle (no GPU free on any node); 1 job was " \
                                "considered before it"
    assert rest_reason(1, 3).startswith("no node has room for it this cycle (at most 1 GPU free on one node); 3 jobs")


@pytest.mark.parametrize("code,words", [(None, "-"), (0, "0"), (3, "3"), (-9, "137 (SIGKILL)"), (-15, "143 (SIGTERM)"),
                                        (-11, "139 (SIGSEGV)")])
def test_an_exit_code_in_a_table_is_the_shells_and_a_signal_is_named(code, words):
    from dispatcher.cli import exit_words

    assert exit_words(code) == words


def test_the_signal_names_the_pure_core_knows_are_the_os_signal_modules():
    import signal

    from dispatcher.core.errors import exit_fields, signal_name

    assert [signal_name(n) for n in range(1, 32)] == [signal.Signals(n).name for n in range(1, 32)]
    assert signal_name(77) == "signal 77"
    rt = {34: "SIGRTMIN", 40: "SIGRTMIN+6", 49: "SIGRTMIN+15", 50: "SIGRTMAX-14", 64: "SIGRTMAX"}  # as `kill -l`
    assert {n: signal_name(n) for n in rt} == rt and signal_name(33) == "signal 33"
    assert exit_fields(-9) == {"exit_status": 137, "signal": "SIGKILL"}
    assert exit_fields(3) == {"exit_status": 3, "signal": None} and exit_fields(None)["exit_status"] is None


def test_a_second_up_names_the_first_ones_server_with_its_password_masked_whichever_record_it_read():
    from dispatcher.core.errors import UpAlreadyRunning

    said = str(UpAlreadyRunning("/home/ada/.local/state/dispatch", 27045, "redis://default:vti-T844@127.0.0.1:44487/0"))
    assert "vti-T844" not in said and "redis://default:***@127.0.0.1:44487/0" in said


def test_ids_that_name_no_job_are_one_line_a_run_array_elements_past_the_last_too():
    # `cancel '34_[1-99]'` on an array of 8 printed 92 lines, one per element it does not have
    from dispatcher.cli.select import not_found

    lines = not_found([f"34_{i}" for i in range(8, 100)] + ["120", "121", "abc", "7_2", "7_4"])
    assert [line.split(" (")[0] for line in lines] == [
        "no jobs with ids 34_8 to 34_99", "no jobs with ids 120 to 121", "no job with id 'abc'",
        "no job with id '7_2'", "no job with id '7_4'"]

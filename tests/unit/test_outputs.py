"""--output patterns and --notify values (core/outputs.py): each letter, the bad ones, arrays; and the
fields a spec carries through its record (store/codec.py), older records read without them."""

import msgpack
import pytest

from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.outputs import end_body, end_env, expand, notify_argv, output_path, parse_notify, parse_output
from dispatcher.core.spec import build_spec, spec_from_request
from dispatcher.store.codec import decode_spec, encode_spec


def spec(**kw):
    kw.setdefault("cwd", "/home/ada/run")
    return build_spec(command=["python", "/opt/train.py"], user="ada", submit_ms=1, **kw)


@pytest.mark.parametrize("pattern, expected", [
    ("%j.out", "/home/ada/run/42.out"),
    ("%u/%x.log", "/home/ada/run/ada/python.log"),  # no --name: the command's first word
    ("%n-r%r.txt", "/home/ada/run/gpu7-r0.txt"),
    ("%N.out", "/home/ada/run/gpu7.out"),  # Slurm's %N: the node's name
    ("100%%-%j", "/home/ada/run/100%-42"),
    ("/scratch/%u/%j", "/scratch/ada/42"),
    ("plain.txt", "/home/ada/run/plain.txt"),
])
def test_each_letter_of_a_pattern_is_filled_in_for_the_job_on_its_node(pattern, expected):
    assert expand(parse_output(pattern), spec(), "42", "gpu7") == expected


def test_the_name_is_the_jobs_name_when_it_has_one_and_a_gang_rank_is_its_own():
    assert expand("%x-%r", spec(name="bert"), "42", "n2", rank=3) == "/home/ada/run/bert-3"


def test_an_array_element_is_named_by_its_arrays_id_and_its_index_and_a_plain_job_by_its_own_id():
    element = spec().filled(array_of="40", array_index=7)
    assert expand("o/%A_%a.txt", element, "47", "n1") == "/home/ada/run/o/40_7.txt"
    assert expand("o/%A_%a.txt", spec(), "47", "n1") == "/home/ada/run/o/47_.txt"


@pytest.mark.parametrize("bad", ["%q.out", "logs/%", "a%Jb", "dir/", "x\0y"])
def test_an_unknown_letter_or_a_pattern_that_names_no_file_is_one_line_naming_the_flag(bad):
    with pytest.raises(InvalidRequestError) as e:
        spec(output=bad)
    assert str(e.value).startswith("--output") and "\n" not in str(e.value)


def test_no_output_is_no_path_and_a_job_not_placed_yet_has_none():
    assert output_path(spec(), "1", "n1") is None
    assert output_path(spec(output="%j.out"), "1", "") is None


@pytest.mark.parametrize("value", ["https://hooks.example/x?a=1", "http://127.0.0.1:8080/", "notify-send done",
                                   'sh -c "echo $DISPATCH_JOB_ID >> /tmp/f"'])
def test_a_notify_is_a_url_or_a_command_line(value):
    assert spec(notify=value).notify == value


@pytest.mark.parametrize("bad", ["http:///nohost", "sh -c 'unclosed", "x" * 5000])
def test_a_bad_notify_is_one_line_naming_the_flag(bad):
    with pytest.raises(InvalidRequestError) as e:
        parse_notify(bad)
    assert str(e.value).startswith("--notify")


def test_a_command_notify_gets_the_end_as_variables_without_a_shell_in_between():
    body = end_body("9", "failed", 3, "exit code 3", "bert")
    assert end_env(body) == {"DISPATCH_JOB_ID": "9", "DISPATCH_JOB_STATE": "failed", "DISPATCH_EXIT_CODE": "3",
                             "DISPATCH_EXIT_STATUS": "3", "DISPATCH_SIGNAL": "", "DISPATCH_REASON": "exit code 3",
                             "DISPATCH_JOB_NAME": "bert"}
    killed = end_env(end_body("9", "failed", -9, "killed", "bert"))
    assert (killed["DISPATCH_EXIT_CODE"], killed["DISPATCH_EXIT_STATUS"], killed["DISPATCH_SIGNAL"]) == \
        ("-9", "137", "SIGKILL")
    assert end_env(end_body("9", "cancelled", None, "", ""))["DISPATCH_EXIT_CODE"] == ""
    assert notify_argv('sh -c "echo $X >> f"') == ["sh", "-c", "echo $X >> f"]


def test_the_request_fields_and_the_record_carry_both_and_an_older_record_reads_without_them():
    s = spec_from_request({"command": ["true"], "output": "%j.log", "notify": "https://h/x"}, user="ada",
                          submit_ms=1, cwd="/w")
    back = decode_spec(encode_spec(s, "5"))
    assert (back.output, back.notify) == ("%j.log", "https://h/x")
    old = msgpack.unpackb(encode_spec(spec(), "6"), raw=False)
    del old["out"], old["notify"]
    older = decode_spec(msgpack.packb(old))
    assert (older.output, older.notify) == ("", "")

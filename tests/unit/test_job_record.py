"""The job hash has one field table (store/job_record.py): keys.py's docstring lists the same fields, the
Lua scripts write no field outside it, and every named selection a reader takes is part of it."""

import re
from pathlib import Path

from dispatcher.store import job_record, keys
from dispatcher.store.job_record import NAMES, record_from_hash

LUA = Path(job_record.__file__).parent / "lua"
WRITES = ("HSET", "HDEL", "HINCRBY", "HINCRBYFLOAT")


def _documented_fields() -> set[str]:
    doc = keys.__doc__
    section = doc[doc.index("| <ns>:job:<id>              | hash"):doc.index("| <ns>:job:<id>:log")]
    listed = section.split("checked against this list):", 1)[1]
    return set(re.findall(r"[a-z][a-z_]*", listed))


def _arguments(source: str, start: int) -> list[str]:
    """The comma-separated arguments of the call whose '(' is at `start` (nested calls kept whole)."""
    depth, args, current = 0, [], ""
    for ch in source[start:]:
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(current.strip())
                return args
        if ch == "," and depth == 1:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    raise AssertionError("unclosed call")


def _job_fields_the_scripts_write() -> dict[str, set[str]]:
    """script -> the literal field names it writes on a job hash (KEYS[1], or KEYS[i] in submit.lua)."""
    out = {}
    for path in sorted(LUA.glob("*.lua")):
        source = path.read_text()
        job_key = "KEYS[i]" if path.stem == "submit" else "KEYS[1]"
        written = set()
        for m in re.finditer(r"redis\.p?call\(", source):
            args = _arguments(source, m.end() - 1)
            if len(args) < 3 or args[0].strip("'") not in WRITES or args[1] != job_key:
                continue
            names = args[2::2] if args[0] == "'HSET'" else args[2:3] if "INCRBY" in args[0] else args[2:]
            written |= {a.strip("'") for a in names if a.startswith("'")}
        if written:
            out[path.stem] = written
    return out


def test_keys_docstring_lists_exactly_the_fields_of_the_table():
    assert _documented_fields() == set(NAMES)


def test_the_scripts_write_no_job_field_outside_the_table():
    written = _job_fields_the_scripts_write()
    assert {"submit", "finish", "commit_placement", "mark_running", "cancel"} <= set(written)  # the parser sees them
    strays = {script: sorted(fields - set(NAMES)) for script, fields in written.items() if fields - set(NAMES)}
    assert strays == {}


def test_every_named_selection_is_part_of_the_table():
    for selection in (job_record.SCHEDULER, job_record.OUTCOME, job_record.LAUNCH, job_record.RECOVERY,
                      job_record.PLACED, job_record.IDLE, job_record.FENCE, job_record.WHERE, job_record.SEARCH):
        assert set(selection) <= set(NAMES), selection


def test_a_record_reads_typed_with_absent_fields_empty_and_a_bad_spec_named():
    rec = record_from_hash("7", {b"state": b"running", b"gpus": b"0,3", b"epoch": b"4", b"exit_code": b"oops",
                                 b"gpu_s_lost": b"12.5", b"spec": b"\xc1"})
    assert (rec.state, rec.gpus, rec.epoch, rec.gpu_s_lost) == ("running", (0, 3), 4, 12.5)
    assert rec.exit_code is None and rec.reason == "" and rec.started_ms == 0
    assert rec.spec is None and "job 7" in rec.spec_error

"""Job arrays: parsing --array, the elements a request becomes, how they are stored, and the policy's
cap on how many of one array run at once."""

from __future__ import annotations

import pytest

from dispatcher.core.arrays import element_name, elements, first_ids, parse_array, ranges, request_jobs
from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.model import JobSpec
from dispatcher.policy.schedule import schedule
from dispatcher.store.codec import decode_spec, encode_spec

from tests.builders import NOW_MS, make_job, make_node, snapshot


@pytest.mark.parametrize("text, indices, cap", [
    ("0-3", (0, 1, 2, 3), 0), ("0-99%8", tuple(range(100)), 8), ("1,3,5-9:2", (1, 3, 5, 7, 9), 0),
    ("7", (7,), 0), ("4-6,5", (4, 5, 6), 0), ("0-999", tuple(range(1000)), 0)])
def test_an_array_is_its_indices_and_its_cap(text, indices, cap):
    assert parse_array(text) == (indices, cap)


@pytest.mark.parametrize("text, says", [
    ("", "no index"), ("1,,3", "an empty item"), ("1,", "an empty item"), ("\u0663", "is not an index"), ("9-3", "from low to high"), ("0-9%0", "the cap after %"), ("a-b", "is not an index"),
    ("0-1000", "at most 1000 elements"), ("1-5:0", "step at least 1"), ("0-9%", "the cap after %")])
def test_a_bad_array_is_one_line_naming_the_flag(text, says):
    with pytest.raises(InvalidRequestError, match=says) as e:
        parse_array(text)
    assert str(e.value).startswith("--array ") and "\n" not in str(e.value)


def test_elements_are_the_request_once_per_index_and_stored_with_their_array():
    spec = JobSpec(id="", command=("python", "sweep.py"), user="alice", gpus=1)
    jobs = request_jobs({"array": "2-4%2"}, lambda r: spec, "0")
    assert [j.array_index for j in jobs] == [2, 3, 4] and {j.array_limit for j in jobs} == {2}
    ids = ["12", "13", "14"]
    firsts = first_ids(jobs, ids)
    stored = [decode_spec(encode_spec(j.filled(array_of=firsts[j.array_of]), i)) for j, i in zip(jobs, ids)]
    assert [(s.id, s.array_of, s.array_index, s.array_count, s.array_limit) for s in stored] == \
        [("12", "12", 2, 3, 2), ("13", "12", 3, 3, 2), ("14", "12", 4, 3, 2)]
    plain = decode_spec(encode_spec(spec, "15"))
    assert (plain.array_of, plain.array_index, plain.array_count) == ("", None, 0), "a plain job is no array"


def test_a_gang_cannot_be_an_array():
    with pytest.raises(InvalidRequestError, match="--nodes"):
        elements(JobSpec(id="", command=("x",), gpus=4, nodes=2, gpus_per_node=2), "0-3", "0")


def test_an_element_is_named_array_underscore_index():
    assert element_name("12_5") == ("12", 5)
    assert element_name("12") is None and element_name("x_1") is None and element_name("12_") is None


def _array(first: int, n: int, cap: int, user: str = "alice"):
    return [make_job(str(first + i))._set(array_of=str(first), array_index=i, array_count=n, array_limit=cap)
            .user(user).gpus(1).waited(100) for i in range(n)]


def test_the_policy_starts_no_more_of_an_array_than_its_cap():
    nodes = [make_node("n1").gpus(8)]
    plan = schedule(snapshot(pending=_array(10, 20, 4), nodes=nodes), now_ms=NOW_MS)
    assert len(plan.placements) == 4
    running = [make_job("10")._set(array_of="10", array_index=0, array_count=20, array_limit=4).gpus(1)
               .running_on("n1", 0), make_job("11")._set(array_of="10", array_index=1, array_count=20,
                                                           array_limit=4).gpus(1).running_on("n1", 1)]
    rest = [make_job(str(12 + i))._set(array_of="10", array_index=2 + i, array_count=20, array_limit=4).gpus(1)
            .waited(100) for i in range(18)]
    plan = schedule(snapshot(pending=rest, running=running, nodes=[make_node("n1").gpus(8).held(0, 1)]),
                    now_ms=NOW_MS)
    assert len(plan.placements) == 2, "two run: two more make the cap"
    capped = [v for v in plan.verdicts if "its cap (%4)" in v.reason]
    assert capped, plan.verdicts


def test_a_capped_array_does_not_hold_back_its_users_other_jobs_of_the_same_shape():
    other = make_job("99").gpus(1).waited(50)
    plan = schedule(snapshot(pending=[*_array(10, 6, 1), other], nodes=[make_node("n1").gpus(4)]), now_ms=NOW_MS)
    assert {p.job_id for p in plan.placements} == {"10", "99"}


def test_an_array_is_one_ask_in_fair_share_not_twenty():
    sweep = _array(10, 20, 0, user="alice")
    bob = make_job("50").user("bob").gpus(1).waited(10)  # submitted after the whole array
    plan = schedule(snapshot(pending=[*sweep, bob], nodes=[make_node("n1").gpus(2)]), now_ms=NOW_MS)
    assert "50" in {p.job_id for p in plan.placements}, "bob gets one of the two GPUs"


def test_every_element_an_arrays_cap_holds_back_is_told_so_not_that_no_node_has_room():
    plan = schedule(snapshot(pending=_array(10, 6, 1), nodes=[make_node("n1").gpus(4)]), now_ms=NOW_MS)
    assert [p.job_id for p in plan.placements] == ["10"]
    reasons = {v.job_id: v.reason for v in plan.verdicts}
    assert all(reasons.get(str(i)) == "array 10 runs 1 of its elements, its cap (%1)" for i in range(11, 16)), reasons
    assert plan.rest == 0, "no element is left to the cycle's rest reason"


@pytest.mark.parametrize("indices, shown", [
    (range(0, 999, 2), "0-998:2"), ([0, 1, 2, 3, 5, 7, 8], "0-3,5,7-8"), ([1, 3], "1,3"), ([4], "4"),
    ([*range(10), 20, 30, 40], "0-9,20-40:10")])
def test_a_stepped_array_is_shown_as_its_step_not_every_index(indices, shown):
    """`dispatch queue`'s ID column: 12_[0-998:2], as --array takes it, not 500 numbers."""
    assert ranges(indices) == shown
    assert parse_array(shown)[0] == tuple(sorted(indices))


def test_elements_of_an_array_as_queue_shows_them_are_taken_by_the_commands_on_ids():
    """QA: `cancel 12_[1-3]` (scancel's form, and what queue prints: 12_[0-99%8]) was 'no job with id'."""
    from dispatcher.core.selection import expand_ids, selection

    assert expand_ids(["12_[1-3,7]", "5"]) == ["12_1", "12_2", "12_3", "12_7", "5"]
    assert expand_ids(["12_[0-2%8],12_5,3-4"]) == ["12_0", "12_1", "12_2", "12_5", "3", "4"]
    assert selection(["12_[1,3]"], ["ann,bob"]).users == ("ann", "bob")
    for bad in ("12_[x]", "12_[]", "12_[3-1]"):
        with pytest.raises(InvalidRequestError, match=r"not elements of an array; give e\.g\. 12_\[1-3,7\]"):
            expand_ids([bad])

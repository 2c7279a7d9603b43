"""Job dependencies against a real server and the real scheduler: `--after` waits for success and
fails with its dependency, `--after-any` waits for any end, and bad dependencies are refused at
submit. Agents are played by the scripts they call (mark_running, finish)."""

import pytest

from dispatcher.core.errors import InvalidRequestError
from dispatcher.views.explain import explain
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store.codec import decode_spec
from dispatcher.store.jobs import read_job
from dispatcher.store.scripts import Scripts
from tests.redis.test_store import beat, submit


def run_to_end(client, ns, job_id, state="succeeded", exit_code=0):
    """The job's agent starts it and it ends as `state`."""
    scripts = Scripts(client, ns)
    epoch = read_job(client, ns, job_id)["epoch"]
    assert scripts.mark_running(job_id, epoch, now_ms(), 4242) == 1
    node = read_job(client, ns, job_id)["node"]
    assert scripts.finish(job_id, node, epoch, state, exit_code, now_ms()) == 1


def placed(plan):
    return {p.job_id for p in plan.placements}


def test_an_after_job_waits_until_its_dependency_succeeded(client, ns):
    beat(client, ns, "a", gpus=2)
    first = submit(client, ns, gpus=1)
    then = submit(client, ns, gpus=1, after=first)
    sched = Scheduler(client, ns)
    assert placed(sched.cycle()) == {first}  # a GPU is free, yet `then` is held
    job = read_job(client, ns, then)
    assert job["state"] == "pending" and job["reason"] == f"waits for job {first} (pending) to succeed"
    assert placed(sched.cycle()) == set()  # the reason follows its dependency
    assert read_job(client, ns, then)["reason"] == f"waits for job {first} (assigned) to succeed"
    assert explain(client, ns, then)["outcome"]["code"] == "held"

    run_to_end(client, ns, first)
    assert placed(sched.cycle()) == {then}
    assert read_job(client, ns, then)["after"] == [first]


def test_a_failed_dependency_fails_its_dependents_down_the_chain(client, ns):
    beat(client, ns, "a", gpus=1)
    first = submit(client, ns, gpus=1)
    second = submit(client, ns, gpus=1, after=first)
    third = submit(client, ns, gpus=1, after=second)
    sched = Scheduler(client, ns)
    sched.cycle()
    run_to_end(client, ns, first, "failed", 3)
    for _ in range(3):  # each cycle sees one more link of the chain fail
        sched.cycle()
    job = read_job(client, ns, second)
    assert job["state"] == "failed" and job["reason"] == f"dependency job {first} failed: exit code 3"
    job = read_job(client, ns, third)
    assert job["state"] == "failed" and job["reason"].startswith(f"dependency job {second} failed: dependency")


def test_an_after_any_job_starts_however_its_dependencies_ended(client, ns):
    beat(client, ns, "a", gpus=2)
    ok, bad = submit(client, ns, gpus=1), submit(client, ns, gpus=1)
    cleanup = submit(client, ns, gpus=1, after_any=f"{ok},{bad}")
    sched = Scheduler(client, ns)
    assert placed(sched.cycle()) == {ok, bad}
    run_to_end(client, ns, bad, "failed", 1)
    assert placed(sched.cycle()) == set()  # `ok` still runs
    assert read_job(client, ns, cleanup)["reason"] == f"waits for job {ok} (assigned) to end"
    run_to_end(client, ns, ok)
    assert placed(sched.cycle()) == {cleanup}


def test_a_dependency_met_before_the_scheduler_took_the_lead_is_seen_on_its_first_read(client, ns):
    beat(client, ns, "a", gpus=1)
    first = submit(client, ns, gpus=1)
    Scheduler(client, ns).cycle()
    run_to_end(client, ns, first)
    then = submit(client, ns, gpus=1, after=first)
    assert placed(Scheduler(client, ns, holder="another").cycle()) == set()  # the first one still leads
    Scheduler(client, ns).lease.release()
    fresh = Scheduler(client, ns, holder="fresh")
    fresh.lease.client.delete(f"{ns}:scheduler:leader")  # (the first scheduler is gone)
    assert placed(fresh.cycle()) == {then}


@pytest.mark.parametrize("flag, make, message", [
    ("after", lambda client, ns: "9999", "--after: there is no job 9999"),
    ("after_any", lambda client, ns: "9999", "--after-any: there is no job 9999"),
    ("after", lambda client, ns: "1,a:b", "--after: 'a:b' is not a job id"),
])
def test_bad_dependencies_are_refused_at_submit_and_nothing_is_written(client, ns, flag, make, message):
    dep = make(client, ns)
    before = client.dbsize()
    with pytest.raises(InvalidRequestError) as e:
        submit(client, ns, gpus=1, **{flag: dep})
    assert message in str(e.value)
    assert client.dbsize() == before


def test_a_dependent_of_a_job_that_already_failed_is_taken_and_failed_at_once_with_the_reason(client, ns):
    gone = _cancelled(client, ns)
    then = submit(client, ns, gpus=1, after=gone)  # a pipeline script works whatever the timing
    Scheduler(client, ns).cycle()
    job = read_job(client, ns, then)
    assert job["state"] == "failed" and f"dependency job {gone}" in job["reason"], job["reason"]


def _cancelled(client, ns) -> str:
    job_id = submit(client, ns)
    assert Scripts(client, ns).cancel(job_id, now_ms(), "changed my mind") == 1
    return job_id


def submit_array(client, ns, indices="0-3", **kw) -> list[str]:
    """An array's element ids, in index order (the first is the array's id)."""
    from dispatcher.core.arrays import elements
    from dispatcher.core.spec import build_spec
    from dispatcher.store.jobs import write_jobs

    spec = build_spec(user="alice", submit_ms=now_ms(), command=["true"], **kw)
    return write_jobs(client, ns, elements(spec, indices, "0"))


def test_after_an_array_waits_for_every_element_and_fails_when_one_fails(client, ns):
    beat(client, ns, "a", gpus=4)
    elements = submit_array(client, ns, gpus=1)
    array = elements[0]
    then = submit(client, ns, gpus=1, after=array)
    cleanup = submit(client, ns, gpus=1, after_any=array)
    assert read_job(client, ns, then)["after"] == elements  # Slurm's afterok:ARRAY: each element
    assert read_job(client, ns, cleanup)["after_any"] == elements
    sched = Scheduler(client, ns)
    assert placed(sched.cycle()) == set(elements)
    run_to_end(client, ns, elements[0])  # element 0 alone was all the old code waited for
    run_to_end(client, ns, elements[1])
    assert placed(sched.cycle()) == set()
    job = read_job(client, ns, then)
    assert job["reason"] == f"waits for jobs {array}_[2-3] (assigned) to succeed"  # elements by name, not id
    assert explain(client, ns, then)["outcome"] == {"code": "held", "reason": job["reason"], "rank": None}

    run_to_end(client, ns, elements[2], "failed", 3)
    assert placed(sched.cycle()) == set()
    job = read_job(client, ns, then)  # failed at once, while element 3 still runs
    assert job["state"] == "failed" and job["reason"] == f"dependency job {array}_2 failed: exit code 3"
    assert read_job(client, ns, cleanup)["reason"] == f"waits for job {array}_3 (assigned) to end"
    run_to_end(client, ns, elements[3])
    assert placed(sched.cycle()) == {cleanup}


def test_an_element_id_names_that_element_only(client, ns):
    elements = submit_array(client, ns, "1,5,9")
    array = elements[0]
    assert read_job(client, ns, submit(client, ns, after=f"{array}_5"))["after"] == [elements[1]]
    assert read_job(client, ns, submit(client, ns, after_any=f"{array}_9,{array}_1"))["after_any"] == [
        elements[2], elements[0]]
    assert read_job(client, ns, submit(client, ns, after=f"{elements[1]}"))["after"] == [elements[1]]
    (single,) = submit_array(client, ns, "7")
    assert read_job(client, ns, submit(client, ns, after=f"{single}_7"))["after"] == [single]
    plain = submit(client, ns)
    before = client.dbsize()
    for flag, dep in (("after", f"{array}_2"), ("after_any", f"{plain}_0"), ("after", f"{single}_0")):
        with pytest.raises(InvalidRequestError) as e:
            submit(client, ns, **{flag: dep})
        assert str(e.value) == f"--{flag.replace('_', '-')}: there is no job {dep}"
    assert client.dbsize() == before


def test_a_held_reason_lists_ranges_by_state_and_stays_short(client, ns):
    from dispatcher.store.dependencies import HELD, judge_all
    from dispatcher.store.job_record import read_fields

    elements = submit_array(client, ns, "0-19")
    plain = submit(client, ns)  # (the next id after the array's last)
    for job_id in elements[::2]:
        assert Scripts(client, ns).cancel(job_id, now_ms(), "not needed") == 1
    then = submit(client, ns, after=f"{elements[1]},{plain}", after_any=elements[0])
    spec = decode_spec(read_fields(client, ns, then, ("spec",))["spec"])
    assert spec.after == (elements[1], plain) and len(spec.after_any) == 20
    (verdict, why), = judge_all(client, ns, [spec]).values()
    odd = [int(e) for e in elements[1::2]]
    assert verdict == HELD and why == (f"waits for jobs {elements[1]},{plain} (pending) to succeed, jobs "
                                       + ",".join(map(str, odd[:6])) + " and 4 more (pending) to end")
    known = {e: decode_spec(read_fields(client, ns, e, ("spec",))["spec"]) for e in elements}
    (verdict, why), = judge_all(client, ns, [spec], known).values()  # the queue's specs name the elements
    array = elements[0]
    assert why == (f"waits for jobs {array}_1,{plain} (pending) to succeed, jobs {array}_[1,3,5,7,9,11 and 4 more] "
                   "(pending) to end")


def test_a_dependency_list_past_the_most_is_refused(client, ns, monkeypatch):
    from dispatcher.store import dependencies

    monkeypatch.setattr(dependencies, "MAX_WAITED", 3)
    array = submit_array(client, ns)[0]
    with pytest.raises(InvalidRequestError) as e:
        submit(client, ns, after=array)
    assert str(e.value) == f"--after: {array} name 4 jobs (an array's elements counted one by one); at most 3"

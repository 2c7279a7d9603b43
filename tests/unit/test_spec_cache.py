"""The scheduler's spec cache (store/spec_cache.py) plans twins (one history: user, command with its
numbers masked, GPU request; and one estimate of their own) with the newest one's estimate: copies of a command submitted before its first runs finished
(no prediction then) are not overtaken by a copy submitted after (predicted short)."""

from dispatcher.core.spec import build_spec
from dispatcher.store.codec import encode_spec
from dispatcher.store.spec_cache import SpecCache


def job(job_id: str, submit_ms: int, command=("python", "train.py"), est_s=None, user="ana", time=None):
    spec = build_spec(command=list(command), user=user, submit_ms=submit_ms, job_id=job_id, gpus=1, est=est_s,
                      time=time)
    return job_id, encode_spec(spec, job_id)


def test_older_twins_without_a_prediction_take_the_newest_ones_when_it_arrives():
    cache = SpecCache()
    for i in (1, 2, 3):  # submitted before any copy had finished: no plan estimate
        cache.get(*job(str(i), 1000 + i))
    assert cache.get(*job("4", 2000), plan_est="90.0").est_s == 90.0
    assert cache.take_restamped() == {"1", "2", "3"}
    assert [cache.specs[i].est_s for i in "123"] == [90.0, 90.0, 90.0]
    assert cache.take_restamped() == set()


def test_a_twin_read_after_the_newest_takes_its_estimate_and_an_older_prediction_gives_way():
    cache = SpecCache()
    cache.get(*job("9", 5000), plan_est="40.0")
    assert cache.get(*job("2", 1000)).est_s == 40.0  # (a whole read meets them in any order)
    assert cache.get(*job("3", 1500), plan_est="300.0").est_s == 40.0  # its own prediction is older
    assert cache.take_restamped() == set()


def test_other_commands_users_or_own_estimates_are_no_twins():
    cache = SpecCache()
    cache.get(*job("1", 1000))
    cache.get(*job("2", 1000, command=("python", "eval.py")))
    cache.get(*job("6", 1000, command=("python", "eval.py", "--lr", "0.1")))
    cache.get(*job("3", 1000, user="bo"))
    cache.get(*job("4", 1000, est_s=600.0))
    cache.get(*job("5", 2000), plan_est="90.0")
    cache.get(*job("7", 1000, command=("python", "train.py", "--seed", "4")))  # a sweep's point: one history
    cache.get(*job("8", 3000, command=("python", "train.py", "--seed", "5")), plan_est="70.0")
    assert cache.take_restamped() == {"1", "7"}
    assert (cache.specs["2"].est_s, cache.specs["3"].est_s, cache.specs["4"].est_s) == (None, None, 600.0)
    assert (cache.specs["1"].est_s, cache.specs["7"].est_s) == (90.0, 70.0)


def test_a_forgotten_kind_starts_over():
    cache = SpecCache()
    cache.get(*job("1", 1000), plan_est="90.0")
    cache.forget("1")
    assert cache.get(*job("2", 500)).est_s is None  # no twin of it is kept any more
    assert set(cache.kinds) == {"2"} and len(cache.members) == 1


def test_a_whole_read_oldest_first_restamps_each_twin_once_with_the_newest_estimate():
    cache = SpecCache()
    for i in range(1, 6):  # each copy predicted from the history of its own submit
        cache.get(*job(str(i), 1000 + i), plan_est=str(100.0 + i))
    assert cache.take_restamped() == {"1", "2", "3", "4"}
    assert {cache.specs[str(i)].est_s for i in range(1, 6)} == {105.0}


def test_the_fingerprint_submit_wrote_in_the_record_names_the_kind_and_a_bad_one_is_worked_out_again():
    from dispatcher.core.predict import fingerprint
    from dispatcher.store.codec import decode_spec
    from dispatcher.store.spec_cache import kind_of

    spec = decode_spec(job("1", 1000)[1])
    assert kind_of(spec, b"00000000000000ab") == ("00000000000000ab", None)  # as the record says: not hashed here
    assert kind_of(spec, b"not a fingerprint") == kind_of(spec) == (fingerprint(spec), None)


def test_the_policy_plans_a_job_no_longer_than_its_time_limit_as_slurms_backfill_does():
    cache = SpecCache()
    assert cache.get(*job("1", 1000, time="15s")).est_s == 15.0  # no estimate: its limit
    assert cache.get(*job("2", 1000, est_s=60.0, time="15s")).est_s == 15.0  # an estimate past it: its limit
    assert cache.get(*job("3", 1000, est_s=10.0, time="15s")).est_s == 10.0  # an estimate within it: its own
    assert cache.get(*job("4", 1000, command=("sleep", "1"), time="6s"), plan_est="20.0").est_s == 6.0  # predicted


def test_a_twin_takes_the_newest_estimate_within_its_own_time_limit():
    cache = SpecCache()
    cache.get(*job("1", 1000, time="30s"))
    cache.get(*job("2", 1001))
    cache.get(*job("3", 2000), plan_est="90.0")
    assert cache.take_restamped() == {"2"}  # 1 plans with its limit, which the newer estimate is past
    assert (cache.specs["1"].est_s, cache.specs["2"].est_s) == (30.0, 90.0)

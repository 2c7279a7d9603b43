"""Requeue of ended jobs (lua/requeue.lua, store/ended.py) and the ended-jobs indexes it and the ends keep,
against a real server and the real scheduler; the dashboard's page of ended jobs and its requeue, through
Flask's test client (same-origin and CSRF checked as in a browser's request)."""

import json
import threading

import pytest

from dispatcher.auth.identity import Verifier, token_for
from dispatcher.clock import now_ms
from dispatcher.core.errors import InvalidStateError, JobNotFound
from dispatcher.core.model import FINAL_STATES
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import keys
from dispatcher.store.ended import ended_ids, requeue_job
from dispatcher.store.jobs import cancel_job, read_job
from dispatcher.store.requests import RequestServer, act_signed
from dispatcher.store.scripts import Scripts
from dispatcher.views.board import Board
from dispatcher.views.dashboard import create_app
from dispatcher.views.finished import finished_page
from tests.redis.test_store import beat, submit


def run_to(client, ns, sched, job_id, state, code=None, reason=""):
    """Place job_id (one cycle), start it on its node and end it as `state`."""
    sched.cycle()
    s, job = Scripts(client, ns), read_job(client, ns, job_id)
    assert job["state"] == "assigned", job
    assert s.mark_running(job_id, job["epoch"], now_ms(), 4242) == 1
    assert s.finish(job_id, job["node"], job["epoch"], state, code, now_ms(), reason) == 1


def in_ended(client, ns, job_id):
    return {s for s in FINAL_STATES if client.zscore(keys.jobs_ended(ns, s), job_id) is not None}


def test_a_failed_job_goes_back_to_the_queue_as_a_new_attempt_and_the_scheduler_places_it_again(client, ns):
    beat(client, ns, "n1", gpus=1)
    sched = Scheduler(client, ns)
    job_id = submit(client, ns, gpus=1)
    run_to(client, ns, sched, job_id, "failed", 3, "exit code 3")
    ended = read_job(client, ns, job_id)
    assert in_ended(client, ns, job_id) == {"failed"}
    assert client.zscore(keys.jobs_ended(ns, "failed"), job_id) == ended["finished_at"] * 1000
    sched.cycle()  # the leader sees the end
    before = now_ms()
    assert requeue_job(Scripts(client, ns), client, ns, job_id, "alice", before) == "requeued"
    job = read_job(client, ns, job_id)
    assert (job["state"], job["attempt"], job["epoch"]) == ("pending", ended["attempt"] + 1, ended["epoch"] + 1)
    assert (job["finished_at"], job["exit_code"], job["node"], job["started_at"]) == (None, None, None, None)
    assert job["reason"] == "requeued by alice (it had failed)"
    assert (job["requeued_by"], job["requeued_at"]) == ("alice", before / 1000)
    assert job["command"] == ended["command"] and [a["outcome"] for a in job["attempts"]] == ["failed"]
    assert in_ended(client, ns, job_id) == set()
    assert client.zscore(keys.jobs_pending(ns), job_id) == before  # it waits from now
    assert job_id.encode() in client.smembers(keys.jobs_changed(ns))
    sched.cycle()
    again = read_job(client, ns, job_id)
    assert (again["state"], again["node"]) == ("assigned", "n1")
    run_to_end = Scripts(client, ns)
    assert run_to_end.mark_running(job_id, again["epoch"], now_ms(), 1) == 1
    assert run_to_end.finish(job_id, "n1", again["epoch"], "succeeded", 0, now_ms()) == 1
    done = read_job(client, ns, job_id)
    assert done["state"] == "succeeded" and [a["outcome"] for a in done["attempts"]] == ["failed", "succeeded"]
    assert in_ended(client, ns, job_id) == {"succeeded"}


@pytest.mark.parametrize("state", ["pending", "assigned", "running"])
def test_a_job_that_has_not_ended_is_refused_saying_its_state_and_left_as_it_was(client, ns, state):
    beat(client, ns, "n1", gpus=1)
    job_id = submit(client, ns, gpus=1)
    if state != "pending":
        Scheduler(client, ns).cycle()
    if state == "running":
        job = read_job(client, ns, job_id)
        Scripts(client, ns).mark_running(job_id, job["epoch"], now_ms(), 1)
    before = client.hgetall(keys.job(ns, job_id))
    with pytest.raises(InvalidStateError, match=f"job {job_id} is {state}; cannot requeue it"):
        requeue_job(Scripts(client, ns), client, ns, job_id, "alice", now_ms())
    assert client.hgetall(keys.job(ns, job_id)) == before


def test_an_unknown_job_is_refused(client, ns):
    for job_id in ("404", "", "1:log"):
        with pytest.raises(JobNotFound):
            requeue_job(Scripts(client, ns), client, ns, job_id, "alice", now_ms())


def test_a_cancelled_pending_job_is_indexed_as_cancelled_and_requeued_from_there(client, ns):
    job_id = submit(client, ns)
    assert cancel_job(Scripts(client, ns), client, ns, job_id, now_ms()) == "cancelled"
    assert in_ended(client, ns, job_id) == {"cancelled"}
    requeue_job(Scripts(client, ns), client, ns, job_id, "bob", now_ms())
    assert read_job(client, ns, job_id)["state"] == "pending" and in_ended(client, ns, job_id) == set()
    assert client.zscore(keys.jobs_pending(ns), job_id) is not None


def test_the_pages_of_ended_jobs_are_newest_first_by_state_and_user(client, ns):
    s, ids = Scripts(client, ns), []
    for i in range(7):  # cancelled while pending, one by one: end times in order
        job_id = submit(client, ns) if i % 2 else _submit_as(client, ns, "bob")
        cancel_job(s, client, ns, job_id, 1_000_000 + i)
        ids.append(job_id)
    newest = list(reversed(ids))
    page = ended_ids(client, ns, ("cancelled",), skip=0, count=3)
    assert (page["ids"], page["total"], page["more"]) == (newest[:3], 7, True)
    last = ended_ids(client, ns, ("cancelled",), skip=6, count=3)
    assert (last["ids"], last["more"]) == (newest[6:], False)
    assert ended_ids(client, ns, ("failed",))["ids"] == []
    bob = [j for j in newest if read_job(client, ns, j)["user"] == "bob"]
    got = ended_ids(client, ns, FINAL_STATES, user="bob", skip=1, count=2)
    assert (got["ids"], got["more"], got["total"]) == (bob[1:3], True, None)
    cut = ended_ids(client, ns, FINAL_STATES, user="nobody-at-all", look=5)
    assert (cut["ids"], cut["cut"], cut["looked"]) == ([], True, 5)
    shown = finished_page(client, ns, "all", "", 0, 2)
    assert [j["id"] for j in shown["jobs"]] == newest[:2] and shown["jobs"][0]["reason"] == "cancelled by user"
    with pytest.raises(Exception, match="state must be one of"):
        finished_page(client, ns, "running")


def _submit_as(client, ns, user):
    from dispatcher.core.spec import build_spec
    from dispatcher.store.jobs import write_jobs

    return write_jobs(client, ns, [build_spec(command=["true"], user=user, submit_ms=now_ms())])[0]


def test_under_identity_only_the_owner_or_an_admin_may_requeue(client, ns, monkeypatch):
    secret = b"s" * 32
    server = RequestServer(client, ns, Verifier(secret, admins=("boss",)), Scripts(client, ns))
    server.publish_mode()
    job_id = submit(client, ns)  # alice's
    cancel_job(Scripts(client, ns), client, ns, job_id, now_ms())

    def as_user(user):
        stop, answers = threading.Event(), []

        def serve():
            while not stop.is_set():
                server.serve()
                stop.wait(0.02)
        t = threading.Thread(target=serve)
        t.start()
        try:
            monkeypatch.setenv("DISPATCH_TOKEN", token_for(secret, user))
            answers.append(act_signed(client, ns, "requeue", user, job_id))
        except Exception as e:
            answers.append(e)
        finally:
            stop.set()
            t.join()
        return answers[0]

    refused = as_user("mallory")
    assert "belongs to alice; only its owner or an admin may requeue it" in str(refused)
    assert read_job(client, ns, job_id)["state"] == "cancelled"
    assert as_user("boss") == "requeued"
    job = read_job(client, ns, job_id)
    assert (job["state"], job["requeued_by"]) == ("pending", "boss")
    assert "is pending; cannot requeue it" in str(as_user("alice"))


@pytest.mark.parametrize("kind", ["requeue", "cancel"])
def test_a_post_from_another_site_or_without_the_token_is_refused_and_changes_nothing(client, ns, kind):
    job_id = submit(client, ns)
    if kind == "requeue":
        cancel_job(Scripts(client, ns), client, ns, job_id, now_ms())
    app = create_app(Board(client, ns), allow_cancel=True).test_client()
    csrf = app.get("/api/config").get_json()["csrf"]
    before = client.hgetall(keys.job(ns, job_id))
    url = f"/api/job/{job_id}/{kind}"
    for headers in ({"X-Dispatch-CSRF": csrf, "Origin": "http://evil.example"},
                    {"X-Dispatch-CSRF": csrf, "Referer": "http://evil.example/page"}, {}):
        r = app.post(url, data="{}", content_type="application/json", headers=headers)
        assert r.status_code == 403, r.get_json()
    assert client.hgetall(keys.job(ns, job_id)) == before
    r = app.post(url, data="{}", content_type="application/json",
                 headers={"X-Dispatch-CSRF": csrf, "Origin": "http://localhost"})
    assert r.status_code == 200, r.get_json()
    assert read_job(client, ns, job_id)["state"] == ("pending" if kind == "requeue" else "cancelled")
    if kind == "requeue":
        assert read_job(client, ns, job_id)["requeued_by"] == "anonymous from 127.0.0.1"


def test_a_read_only_dashboard_refuses_a_requeue_and_serves_the_page(client, ns):
    job_id = submit(client, ns)
    cancel_job(Scripts(client, ns), client, ns, job_id, now_ms())
    app = create_app(Board(client, ns)).test_client()
    csrf = app.get("/api/config").get_json()["csrf"]
    r = app.post(f"/api/job/{job_id}/requeue", data="{}", content_type="application/json",
                 headers={"X-Dispatch-CSRF": csrf})
    assert r.status_code == 403 and "--allow-cancel to requeue" in r.get_json()["error"]
    r = app.post(f"/api/job/{job_id}/delete", data="{}", content_type="application/json",
                 headers={"X-Dispatch-CSRF": csrf})
    assert r.status_code == 404 and "no action 'delete'" in r.get_json()["error"]
    got = json.loads(app.get("/api/finished?state=cancelled&per=10").data)
    assert [j["id"] for j in got["jobs"]] == [job_id] and got["total"] == 1
    assert app.get("/api/finished?state=bogus").status_code == 400
    assert b"finished.js" in app.get("/finished").data


def test_dispatch_requeue_puts_ended_jobs_back_and_refuses_the_others_in_one_line(cli, client):
    ended, waiting = cli.submit("--", "true"), cli.submit("--", "true")
    assert cli.run("cancel", ended).stdout.strip() == f"{ended}: cancelled"
    p = cli.run("requeue", ended, waiting, check=False)  # every job is checked before any is requeued
    assert p.returncode != 0 and p.stderr.strip() == f"dispatch: error: job {waiting} is pending; cannot requeue it"
    assert cli.show(ended)["state"] == "cancelled"
    assert cli.run("requeue", ended).stdout.strip() == f"{ended}: requeued"
    shown = cli.show(ended)
    assert shown["state"] == "pending" and shown["reason"].startswith("requeued by ")
    for args in ((ended,), ("999999",), ()):
        p = cli.run("requeue", *args, check=False)
        assert p.returncode != 0 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert "no job with id '999999'" in cli.run("requeue", "999999", check=False).stderr

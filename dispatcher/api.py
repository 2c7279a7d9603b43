"""The Python API: what `dispatch submit/show/cancel/requeue/wait` do, for programs.

    from dispatcher.api import Client
    c = Client()                         # the server `dispatch up` recorded, or DISPATCH_REDIS_URL
    job = c.submit(["python", "train.py"], gpus=2, gpu_type="A100", priority="high", est="2h")
    c.wait([job], timeout_s=3600)        # {'17': 'succeeded'}

Requests are validated exactly as the CLI validates them (InvalidRequestError).
"""

from __future__ import annotations

import time

from .clock import now_ms
from .config import resolve_url
from .auth.identity import caller_dir, current_user
from .core.memo import gc_paused
from .core.arrays import label, request_jobs
from .begin import resolved
from .core.spec import spec_from_request
from .store import jobs as store_jobs
from .store.connect import connect, ride_out_within
from .store.keys import DEFAULT_NS


class Client:
    def __init__(self, url: str | None = None, ns: str = DEFAULT_NS):
        self.url, self.ns = resolve_url(url), ns
        self.redis = connect(self.url)
        self._scripts = None

    @property
    def scripts(self):
        if self._scripts is None:
            from .store.scripts import Scripts

            self._scripts = Scripts(self.redis, self.ns)
        return self._scripts

    def _specs(self, requests) -> list:
        """The jobs of these requests (an array's elements too), each checked as the CLI checks them."""
        user, submit_ms, cwd = self._caller()

        def build(request):
            return spec_from_request(resolved(request, submit_ms), user=user, submit_ms=submit_ms, cwd=cwd)
        return [s for n, r in enumerate(requests) for s in request_jobs(r, build, str(n))]

    @staticmethod
    def _caller() -> tuple[str, int, str]:
        """Who submits, when, from where: the defaults of a request's user, submit time and cwd."""
        return current_user(), now_ms(), caller_dir()

    def submit(self, command, **fields) -> str:
        """Submit one job; fields are submit's flags (gpus=2, gpu_type='A100', est='2h', array='0-9%2', ...).
        Returns its id (an array's: its first element's)."""
        return self._write(self._specs([{**fields, "command": command}]))[0]

    def submit_many(self, requests) -> list[str]:
        """Submit many jobs in one transaction; `requests` are dicts with 'command' and submit's fields.
        Every request is validated before anything is written: one bad request writes nothing.
        (With identity on, each job is its own signed request.)"""
        with gc_paused():
            return self._write(self._specs(requests))

    def _write(self, specs) -> list[str]:
        from .store.requests import submit_specs

        return submit_specs(self.redis, self.ns, specs, current_user())

    def show(self, job_id: str) -> dict:
        return store_jobs.read_job(self.redis, self.ns, str(job_id))

    def cancel(self, job_id: str) -> str:
        from .store.requests import act_signed, identity_on

        if identity_on(self.redis, self.ns):
            return act_signed(self.redis, self.ns, "cancel", current_user(), str(job_id))
        return store_jobs.cancel_job(self.scripts, self.redis, self.ns, str(job_id), now_ms())

    def requeue(self, job_id: str) -> str:
        """Put an ended job back in the queue under its id, as a new attempt (dispatch requeue): "requeued"."""
        from .store.ended import requeue_job
        from .store.requests import act_signed, identity_on

        if identity_on(self.redis, self.ns):
            return act_signed(self.redis, self.ns, "requeue", current_user(), str(job_id))
        return requeue_job(self.scripts, self.redis, self.ns, str(job_id), current_user(), now_ms())

    def wait(self, job_ids, timeout_s: float | None = None, poll_s: float = 0.2, on_wait=None) -> dict[str, str]:
        """Block until every job is final; returns id -> state. Raises TimeoutError past timeout_s. A server
        away for a moment (restarting) is waited for (store/connect.ride_out; `on_wait(error)` once), up
        to a minute, or to timeout_s: then it is a timeout too."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        states: dict[str, str] = {}
        names: dict[str, str] = {}  # as people name them: an array's element as 12_5
        while True:
            for j in job_ids:
                if not store_jobs.is_final(states.get(j, "")):
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    view = ride_out_within(lambda: self.show(j), left, timeout_s=timeout_s, on_wait=on_wait)
                    states[j], names[j] = view["state"], label(view)
            if all(store_jobs.is_final(s) for s in states.values()):
                return states
            if deadline is not None and time.monotonic() > deadline:
                left = [f"{names[j]} ({s})" for j, s in states.items() if not store_jobs.is_final(s)]
                raise TimeoutError(f"not done after {timeout_s:g}s: job{'s' if len(left) > 1 else ''} "
                                   f"{', '.join(left)}")
            time.sleep(poll_s)

"""The operators' view, live: the dashboard in headless Chromium, /metrics through the Prometheus
parser, and `dispatch top`, against real scheduler and agent processes on fake GPUs.

The browser tests need Debian's `chromium` and `chromium-driver` (.ci/run installs them) and
Selenium (the test extra); without them they skip locally and fail in CI. They take the
screenshots docs/dashboard.md shows, and save them in docs/ with DISPATCH_UPDATE_DOCS=1 (else
in the test's temporary directory, so that a test run leaves the tree as it was).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import signal
import time
import urllib.request
from types import SimpleNamespace

import pytest

from dispatcher.core.model import GpuInfo
from dispatcher.store.nodes import NodeRecord
from dispatcher.store.samples import record_sample
from tests.e2e.test_zombies_live import zombie

from .dashboard_kit import ENV, browser, full_page_screenshot, get, shots_dir, start_dashboard, text_of, wait_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def seed_history(client, ns: str, hours: float = 3.0) -> None:
    """Samples for the hours before the test, through record_sample. The cluster itself is minutes
    old, so this history is made up: a working day's rise of allocation and queue on three nodes."""
    now = int(time.time() * 1000) - 60_000
    steps = int(hours * 3600 / 60)
    for i in range(steps):
        t, phase = now - (steps - i) * 60_000, i / steps
        busy = min(1.0, 0.3 + 0.8 * phase + 0.1 * math.sin(i / 9))
        nodes, running = [], []
        for n, size in enumerate((4, 4, 2)):
            held = min(size, round(size * busy + (n - 1) * 0.6 * math.sin(i / 13)))
            gpus = [GpuInfo(g, "NVIDIA A100-80GB", 80.0, util_pct=60 + 35 * math.sin((i + 7 * g + n) / 5) ** 2
                            if g < held else 0.0) for g in range(size)]
            nodes.append(NodeRecord(f"gpu-0{n + 1}", tuple(gpus), 32, 256.0, t, {}))
            running += [SimpleNamespace(node=f"gpu-0{n + 1}", gpus=(g,), spec=SimpleNamespace(cpus=1, mem_gb=4.0))
                        for g in range(held)]
        pending = max(0, int(30 * phase * (1.3 - phase) + 6 * math.sin(i / 7)))
        waiting = [SimpleNamespace(spec=SimpleNamespace(gpus=1 + (j + i // 20) % 3, nodes=0, gpus_per_node=0,
                                                        min_gpus=None, gpu_types=(), gpu_mem_gb=0.0))
                   for j in range(pending)]
        read = SimpleNamespace(nodes=nodes, snapshot=SimpleNamespace(pending=waiting, running=running))
        record_sample(client, ns, t, read, 60.0, every_ms=60_000)


@pytest.fixture
def busy(cli, client):
    """Three live nodes, one dead node, a zombie GPU, and running and pending jobs of every class
    from several users and teams with GPU quotas: (running job ids, pending job ids)."""
    seed_history(client, cli.ns)
    ghost = zombie("gpu-03", 1)
    try:
        yield busy_cluster(cli)
    finally:
        ghost.kill()
        ghost.wait()


def busy_cluster(cli):
    for name, gpus in (("gpu-01", "4xA100-80GB"), ("gpu-02", "4xA100-40GB"), ("gpu-03", "2xV100-16GB")):
        cli.start("worker", "--node", name, "--fake-gpus", gpus, "--cpus", "32", "--mem", "256",
                  "--work-dir", str(cli.home / name))
    doomed = cli.start("worker", "--node", "gpu-04", "--fake-gpus", "2xT4-16GB", "--work-dir", str(cli.home / "g4"))
    cli.wait_for(lambda: len(json.loads(cli.run("nodes", "--json").stdout)) == 4, what="four nodes")
    os.killpg(doomed.pid, signal.SIGKILL)  # gpu-04 stops heartbeating: a dead node
    policy = cli.home / "policy.toml"
    policy.write_text("[teams.vision]\nguarantee_gpus = 4\nlimit_gpus = 6\n[teams.nlp]\nlimit_gpus = 4\n"
                      "[teams.speech]\nguarantee_gpus = 2\n")
    cli.start("scheduler", "--policy", str(policy), **ENV)
    running = submit_all(cli, "train", "2h", [
        ("alice", "vision", "high", 2, "A100"), ("alice", "vision", "normal", 2, "A100"),
        ("bob", "nlp", "normal", 1, "A100"), ("bob", "nlp", "critical", 1, "A100"),
        ("carol", "speech", "low", 1, "V100"), ("dave", "nlp", "normal", 2, "A100")])
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in running), timeout=30,
                 what="the first jobs to run")
    cli.submit("--name", "smoke", "--user", "erin", "--", "sh", "-c", "echo ok")
    cli.submit("--name", "broken", "--user", "erin", "--", "sh", "-c",
               "echo starting; echo 'CUDA error: out of memory' >&2; exit 3")
    pending = submit_all(cli, "sweep", "1h", [
        ("erin", "vision", "high", 4, "A100"), ("frank", "speech", "normal", 2, "A100"),
        ("frank", "speech", "low", 1, "A100"), ("carol", "speech", "critical", 12, "A100"),
        ("bob", "nlp", "normal", 4, "A100"), ("dave", "nlp", "low", 2, "V100")])
    return running, pending


def submit_all(cli, name: str, est: str, rows) -> list[str]:
    """One `sleep 300` job per (user, team, class, GPUs, GPU type); their ids."""
    return [cli.submit("--name", f"{name}-{u}-{i}", "--user", u, "--team", t, "--priority", p, "--gpus", str(g),
                       "--gpu-type", k, "--est", est, "--", "sleep", "300") for i, (u, t, p, g, k) in enumerate(rows)]


def test_the_dashboard_shows_the_queue_the_gpus_and_the_decisions_live(cli, busy, tmp_path):
    running, pending = busy
    base = start_dashboard(cli)
    driver = browser()
    try:
        driver.get(base + "/")
        crit = pending[3]  # 12 A100s: more than all nodes together (8 would be a gang of both A100 nodes)
        wait_page(driver, lambda d: "critical" in text_of(d, "classes") and f"\n{crit} " in "\n" + text_of(d, "jobs"),
                  "the critical job in the queue")
        assert "no live node could ever hold it" in text_of(driver, "jobs")
        wait_page(driver, lambda d: d.find_elements("css selector", '[data-node="gpu-01"] .gpu.held'), "gpu-01's GPUs")
        held = {e.get_attribute("data-job") for e in driver.find_elements("css selector", ".gpu.held")}
        assert set(running) <= held, (running, held)
        wait_page(driver, lambda d: "zombie" in text_of(d, "alerts") and "gpu-04" in text_of(d, "alerts"),
                  "the zombie and dead-node alerts", timeout=30)
        assert driver.find_elements("css selector", '[data-node="gpu-03"] .gpu.blocked')
        assert driver.find_elements("css selector", '.node.dead[data-node="gpu-04"]')
        decisions = text_of(driver, "decisions")
        assert running[0] in decisions and "best fit" in decisions, decisions
        wait_page(driver, lambda d: "failed" in text_of(d, "outcome-reasons"), "the failed job's reason")

        # live: a job ends and another starts in its place, without a reload
        cli.run("cancel", running[2])
        wait_page(driver, lambda d: not d.find_elements("css selector", f'.gpu[data-job="{running[2]}"]'),
                  f"job {running[2]} leaving its GPU")
        wait_page(driver, lambda d: d.find_elements("css selector", f'.gpu[data-job="{pending[2]}"]'),
                  f"job {pending[2]} taking the GPU it freed", timeout=30)
        assert re.search(rf"^\S+ {pending[2]} ", text_of(driver, "decisions"), re.M), text_of(driver, "decisions")
        time.sleep(2.5)  # one more poll, so the screenshot shows the settled state
        full_page_screenshot(driver, shots_dir(tmp_path) / "dashboard.png")

        driver.set_window_size(1480, 1000)
        driver.get(f"{base}/job/{pending[0]}")
        wait_page(driver, lambda d: "rank" in text_of(d, "why") and "score" in text_of(d, "why"), "the job's why")
        assert "submitted" in text_of(driver, "timeline")
        driver.save_screenshot(str(shots_dir(tmp_path) / "dashboard-job.png"))
        failed = [j for j in json.loads(cli.run("queue", "--all", "--json").stdout) if j["name"] == "broken"][0]
        driver.get(f"{base}/job/{failed['id']}")
        wait_page(driver, lambda d: "out of memory" in text_of(d, "log"), "the failed job's output")
        assert "exit code 3" in text_of(driver, "attempts") or "failed" in text_of(driver, "why")
    finally:
        driver.quit()


def test_metrics_parse_as_prometheus_text_and_top_prints_one_frame(cli, busy):
    from prometheus_client.parser import text_string_to_metric_families

    running, pending = busy
    base = start_dashboard(cli)
    # a scrape shows a read at most a second old, and the queue's counts are the leader's last full
    # cycle's: wait for one that saw the last submits as well
    critical_pending = 'dispatch_jobs_pending{class="critical"} 1.0\n'

    def caught_up():
        t = get(base + "/metrics").decode()
        return t if "gpu-04" in t and 'kind="zombie"' in t and critical_pending in t else None

    text = cli.wait_for(caught_up, timeout=30, what="the dead node, the zombie and the critical pending job in /metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    value = {(f.name, s.name, tuple(sorted(s.labels.items()))): s.value
             for f in families.values() for s in f.samples}

    def one(family, **labels):
        return value[(family, family, tuple(sorted(labels.items())))]

    assert one("dispatch_jobs_pending", **{"class": "critical"}) == 1
    assert one("dispatch_jobs_running", **{"class": "critical"}) == 1
    assert one("dispatch_node_up", node="gpu-04") == 0 and one("dispatch_node_up", node="gpu-01") == 1
    assert one("dispatch_node_gpus", node="gpu-03", state="blocked") == 1
    assert one("dispatch_gpu_allocated", node="gpu-01", gpu="0") in (0, 1)
    assert one("dispatch_node_heartbeat_age_seconds", node="gpu-04") > 3
    assert 0 <= one("dispatch_cluster_fragmentation_ratio") <= 1
    assert one("dispatch_scheduler_cycle_seconds") > 0
    assert one("dispatch_alerts_active", kind="dead_node") == 1
    assert families["dispatch_queue_wait_seconds"].type == "histogram"
    starts = sum(s.value for s in families["dispatch_queue_wait_seconds"].samples
                 if s.name == "dispatch_queue_wait_seconds_count")
    assert starts >= len(running), starts
    for name in ("dispatch_preemptions", "dispatch_placements", "dispatch_scheduler_cycles"):
        assert families[name].type == "counter", name

    # a scraper or browser that takes gzip gets it (the board is 1.8 MB at 1,000 nodes), the same content
    for path in ("/metrics", "/api/board"):
        with urllib.request.urlopen(urllib.request.Request(base + path, headers={"Accept-Encoding": "gzip"}),
                                    timeout=30) as r:
            assert (r.headers["Content-Encoding"], r.headers["Vary"]) == ("gzip", "Accept-Encoding"), path
            body = gzip.decompress(r.read())
        plain = get(base + path)
        if path == "/metrics":
            assert {f.name for f in text_string_to_metric_families(body.decode())} == set(families)
        else:
            got, want = json.loads(body), json.loads(plain)
            assert got.keys() == want.keys() and got["classes"] == want["classes"]
            assert [n["name"] for n in got["nodes"]] == [n["name"] for n in want["nodes"]]

    frame = cli.run("top", "--once", COLUMNS="160", **ENV).stdout
    for expected in ("Queue by class", "critical", "gpu-01", "gpu-04", "DEAD", "alice", "zombie",
                     f"{running[0]}"):
        assert expected in frame, (expected, frame)


def test_a_scrape_and_a_poll_show_what_the_leader_published_a_second_before_them(cli, client):
    """A real dashboard process: after a change the leader published and a second's wait, one scrape
    and one poll show the change (before: the read before last, 30-45 s old at a 15 s scrape), with
    the leader's age as of the request."""
    from dataclasses import replace

    from dispatcher.clock import now_ms
    from dispatcher.core.spec import build_spec
    from dispatcher.store.jobs import write_jobs
    from tests.redis.test_board import publish_state

    spec = build_spec(command=["sleep", "60"], user="ann", submit_ms=now_ms(), gpus=1)
    (job,) = write_jobs(client, cli.ns, [spec])
    publish_state(client, cli.ns, "sched-a", {replace(spec, id=job): 0})
    base = start_dashboard(cli)
    assert json.loads(get(base + "/api/board"))["nodes"][0]["gpus"][0]["job"] == job
    assert 'dispatch_gpu_allocated{gpu="0",node="n1"} 1.0' in get(base + "/metrics").decode()
    publish_state(client, cli.ns, "sched-b", {})  # the job ended, another scheduler leads
    time.sleep(1.2)
    text = get(base + "/metrics").decode()
    assert 'dispatch_gpu_allocated{gpu="0",node="n1"} 0.0' in text, text
    assert float(re.search(r"\ndispatch_scheduler_stats_age_seconds (\S+)", text).group(1)) < 2.5
    publish_state(client, cli.ns, "sched-c", {replace(spec, id=job): 1})
    time.sleep(1.2)
    board = json.loads(get(base + "/api/board"))
    assert board["scheduler"]["holder"] == "sched-c" and board["scheduler"]["age_s"] < 2.5
    assert [g["job"] for g in board["nodes"][0]["gpus"]] == [None, job]


def test_the_page_stays_small_with_ten_thousand_pending_jobs(cli, client):
    from dispatcher.api import Client

    cli.start("worker", "--node", "big", "--fake-gpus", "8xA100-80GB")
    classes = ("low", "normal", "high", "critical")
    Client(cli.url, cli.ns).submit_many([{"command": ["true"], "gpus": 16, "priority": classes[i % 4],
                                          "user": f"u{i % 37}"} for i in range(10_000)])
    cli.start("scheduler")  # the board shows the queue as the leader published it
    base = start_dashboard(cli)
    cli.wait_for(lambda: sum(c["pending"] for c in json.loads(get(base + "/api/board"))["classes"]) == 10_000,
                 timeout=60, what="the leader's published queue")
    timings = {}
    for path in ("/api/board", "/api/board", "/api/queue?page=3&per=25"):
        time.sleep(1.1)  # past the board's one-second bound: each answer waits for a fresh read
        t0 = time.perf_counter()
        body = json.loads(get(base + path))
        timings.setdefault(path, []).append(round(time.perf_counter() - t0, 3))
        if path == "/api/board":
            board = body
    assert sum(c["pending"] for c in board["classes"]) == 10_000
    assert len(json.dumps(board)) < 100_000  # a summary, whatever the queue's length
    driver = browser()
    try:
        t0 = time.perf_counter()
        driver.get(base + "/")
        wait_page(driver, lambda d: "10,000 pending" in text_of(d, "queue-total"), "the 10,000 pending jobs")
        wait_page(driver, lambda d: "page 1 of 400" in text_of(d, "q-page"), "the queue's pages")
        shown_s = time.perf_counter() - t0
        rows = len(driver.find_elements("css selector", "#jobs tbody tr"))
        elements = driver.execute_script("return document.getElementsByTagName('*').length")
        assert rows == 25 and elements < 1500, (rows, elements)
        driver.find_element("id", "q-next").click()
        wait_page(driver, lambda d: "page 2 of 400" in text_of(d, "q-page"), "the second page")
        print(f"\n10,000 pending jobs: JSON answers in seconds (first board read cold) {timings}; "
              f"page shown in {shown_s:.2f}s with {rows} job rows, {elements} DOM elements in all")
    finally:
        driver.quit()


def test_cancel_from_the_page_needs_the_owners_or_an_admins_token_when_identity_is_on(cli, client, tmp_path):
    from dispatcher.store.requests import identity_on

    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    cli.start("scheduler", "--secret-file", str(secret), "--admins", "boss")
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--secret-file", str(secret))
    cli.wait_for(lambda: identity_on(client, cli.ns), what="identity on")
    token = {u: cli.run("auth", "token", u, "--secret-file", str(secret)).stdout.strip() for u in ("alice", "bob")}
    job = cli.run("submit", "--", "sleep", "60", DISPATCH_USER="alice", DISPATCH_TOKEN=token["alice"]).stdout.strip()
    read_only = start_dashboard(cli)
    writable = start_dashboard(cli, "--allow-cancel")

    def cancel(base, origin=None, csrf=True, **who):
        headers = {"Content-Type": "application/json"}
        if csrf:
            headers["X-Dispatch-CSRF"] = json.loads(get(f"{base}/api/config"))["csrf"]
        if origin:
            headers["Origin"] = origin
        req = urllib.request.Request(f"{base}/api/job/{job}/cancel", data=json.dumps(who).encode(), method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, body = cancel(writable, origin="http://evil.example", user="alice", token=token["alice"])
    assert status == 403 and "another site" in body["error"], body  # a page of another site, even with her token
    status, body = cancel(writable, csrf=False, user="alice", token=token["alice"])
    assert status == 403 and "CSRF" in body["error"], body  # a form post carries no token
    assert cancel(writable, origin=writable, user="bob", token=token["bob"])[0] == 403  # the page itself: checked on
    assert cancel(read_only, user="alice", token=token["alice"])[0] == 403
    assert cancel(writable)[0] == 403  # no identity given
    status, body = cancel(writable, user="bob", token=token["bob"])
    assert status == 403 and "belongs to alice" in body["error"], body
    status, body = cancel(writable, user="alice", token=token["bob"])
    assert status == 403 and "signature" in body["error"], body
    assert cli.show(job)["state"] in ("pending", "assigned", "running")
    status, body = cancel(writable, user="alice", token=token["alice"])
    assert status == 200 and body["outcome"] in ("cancelled", "requested"), body
    cli.wait_for(lambda: cli.show(job)["state"] == "cancelled", what="the owner's cancel")


def test_on_a_phone_the_page_is_as_wide_as_the_screen_and_shows_its_age(cli):
    cli.start("worker", "--node", "gpu-01", "--fake-gpus", "8xA100-80GB")
    cli.start("scheduler")
    for i in range(6):
        cli.submit("--gpus", "2", "--name", f"a-rather-long-job-name-that-does-not-wrap-{i}", "--", "sleep", "60")
    base = start_dashboard(cli)
    driver = browser()
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
        driver.get(base + "/")
        wait_page(driver, lambda d: "as of" in text_of(d, "updated"), "its age (as of the scheduler's last cycle)")
        wait_page(driver, lambda d: "A100" in text_of(d, "capacity"), "the capacity by GPU model")
        width = driver.execute_script("return document.documentElement.scrollWidth")
        wide = driver.execute_script(
            "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391)"
            ".slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + "
            "Math.round(e.getBoundingClientRect().right))")
        assert width <= 390, f"the page is {width} px wide on a 390 px screen: {wide}"
        assert "stale" not in driver.find_element("tag name", "body").get_attribute("class")
    finally:
        driver.quit()


def test_without_identity_a_cancel_from_the_page_is_warned_of_and_recorded_as_anonymous(cli):
    job = cli.submit("--", "sleep", "60")  # no node: it waits
    base = start_dashboard(cli, "--allow-cancel")
    log = (cli.home / f"dashboard-{len(cli.procs) - 1}.log").read_text()
    assert "anyone who can reach this page may cancel any job" in log, log
    csrf = json.loads(get(f"{base}/api/config"))["csrf"]
    req = urllib.request.Request(f"{base}/api/job/{job}/cancel", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json", "X-Dispatch-CSRF": csrf})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
    shown = cli.show(job)
    assert shown["state"] == "cancelled" and shown["reason"] == "cancelled from the dashboard by anonymous from 127.0.0.1"


def test_a_taken_port_is_a_one_line_error(cli):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        p = cli.run("dashboard", "--port", str(s.getsockname()[1]), check=False, timeout=30)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "--port" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_dashboard_with_an_access_key_shows_nothing_without_it(cli, tmp_path):
    key_file = tmp_path / "dashboard.key"
    key_file.write_text("k+/=" + os.urandom(16).hex())  # characters a URL must quote
    key_file.chmod(0o600)
    base = start_dashboard(cli, "--access-key-file", str(key_file))
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(f"{base}/api/board")
    assert refused.value.code == 401
    bearer = urllib.request.Request(f"{base}/api/board", headers={"Authorization": f"Bearer {key_file.read_text()}"})
    with urllib.request.urlopen(bearer, timeout=30) as r:
        assert r.status == 200
    printed = "".join(p.read_text() for p in cli.home.glob("dashboard-*.log"))
    assert "?key=k%2B%2F%3D" in printed  # the URL to open, quoted
    key_file.chmod(0o644)
    p = cli.run("dashboard", "--port", "0", "--access-key-file", str(key_file), check=False)
    assert p.returncode == 2 and "readable by others" in p.stderr

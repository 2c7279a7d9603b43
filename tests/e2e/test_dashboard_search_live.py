"""The dashboard's search, a node's page, the fair-share history and the freshness banner, live: headless
Chromium against real scheduler and agent processes on fake GPUs (how they are started, and what the
browser tests need: tests/e2e/test_dashboard_live.py)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.e2e.dashboard_kit import browser, get, shots_dir, start_dashboard, text_of, wait_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ENV = {"DISPATCH_NODE_TIMEOUT_S": "4"}


@pytest.fixture
def small(cli):
    """One node of four GPUs running alice's and bob's jobs, carol's waiting (more GPUs than the node
    has), under a policy that guarantees the vision team two GPUs: (alice's, bob's, carol's job)."""
    cli.start("worker", "--node", "gpu-01", "--fake-gpus", "4xA100-80GB", "--cpus", "16", "--mem", "64",
              "--work-dir", str(cli.home / "gpu-01"))
    policy = cli.home / "policy.toml"
    policy.write_text("[teams.vision]\nguarantee_gpus = 2\n")
    scheduler = cli.start("scheduler", "--policy", str(policy), **ENV)
    alice = cli.submit("--name", "train-resnet", "--user", "alice", "--team", "vision", "--gpus", "2", "--",
                       "sleep", "300")
    bob = cli.submit("--name", "sweep-lr-3", "--user", "bob", "--team", "nlp", "--gpus", "1", "--", "sleep", "300")
    carol = cli.submit("--name", "huge", "--user", "carol", "--gpus", "8", "--", "sleep", "300")
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in (alice, bob)), timeout=30,
                 what="alice's and bob's jobs to run")
    return alice, bob, carol, scheduler


def search_for(driver, words: str) -> None:
    box = driver.find_element("id", "search")
    box.clear()
    box.send_keys(words)


def test_search_finds_jobs_by_user_and_name_and_opens_them_and_a_node_has_its_page(cli, small, tmp_path):
    alice, bob, carol, _ = small
    base = start_dashboard(cli)
    driver = browser()
    try:
        driver.get(base + "/")
        wait_page(driver, lambda d: "as of" in text_of(d, "updated"), "the page's age")
        search_for(driver, "alice")
        wait_page(driver, lambda d: f"\n{alice} train-resnet alice vision" in "\n" + text_of(d, "search-results"),
                  "alice's job among the results")
        assert not driver.find_elements("css selector", f'#search-results tr[data-job="{bob}"]')
        assert "found" in text_of(driver, "search-words") and "searched all" in text_of(driver, "search-words")
        search_for(driver, "sweep-lr")
        wait_page(driver, lambda d: f"\n{bob} sweep-lr-3 bob" in "\n" + text_of(d, "search-results"),
                  "bob's job, by a piece of its name")
        search_for(driver, "name:huge*")
        wait_page(driver, lambda d: f"\n{carol} huge carol" in "\n" + text_of(d, "search-results"),
                  "carol's, by a glob")
        driver.save_screenshot(str(shots_dir(tmp_path) / "dashboard-search.png"))
        driver.find_element("css selector", f'#search-results a[href="/job/{carol}"]').click()
        wait_page(driver, lambda d: d.current_url.endswith(f"/job/{carol}") and f"job {carol}" in text_of(d, "title"),
                  "carol's job page")

        driver.get(base + "/")
        link = wait_page(driver, lambda d: d.find_elements("css selector", '#nodes a[href="/node/gpu-01"]'),
                         "gpu-01 linked from the nodes panel")
        link[0].click()
        wait_page(driver, lambda d: "up" in text_of(d, "node-state") and "heartbeat" in text_of(d, "node-state"),
                  "gpu-01's heartbeat")
        wait_page(driver, lambda d: {e.get_attribute("data-job") for e in d.find_elements(
            "css selector", "#node-jobs tbody tr")} == {alice, bob}, "the jobs running on gpu-01")
        rows = driver.find_elements("css selector", "#gpus tbody tr")
        assert len(rows) == 4 and all("A100" in r.text for r in rows), [r.text for r in rows]
        held = {r.get_attribute("data-job") for r in rows} - {""}
        assert held == {alice, bob}, held
        assert "alice" in text_of(driver, "gpus")
        assert driver.find_elements("css selector", f'#node-decisions a[href="/job/{alice}"]')
        assert "16 CPUs" in text_of(driver, "node-facts")
        driver.save_screenshot(str(shots_dir(tmp_path) / "dashboard-node.png"))
        missing = json.loads(get_error(base + "/api/node/gpu-99"))
        assert "no node 'gpu-99'" in missing["error"]

        # fair share over time: the leader's samples carry the GPUs each team and user holds
        cli.wait_for(lambda: any(s.get("teams", {}).get("vision") == 2 and s["users"].get("bob") == 1
                                 for s in json.loads(get(base + "/api/history?hours=1"))["samples"]),
                     timeout=40, what="a sample with the teams' GPUs")
        driver.get(base + "/")
        wait_page(driver, lambda d: "vision guarantee" in text_of(d, "share-legend"), "the fair-share chart's legend",
                  timeout=30)
        assert "alice" not in text_of(driver, "share-legend")
        driver.find_element("css selector", '#share-by option[value="users"]').click()
        wait_page(driver, lambda d: "alice" in text_of(d, "share-legend"), "the chart per user")
        driver.find_element("css selector", '#share-by option[value="teams"]').click()
        driver.execute_script("document.getElementById('share-panel').scrollIntoView()")
        driver.save_screenshot(str(tmp_path / "dashboard-share.png"))
    finally:
        driver.quit()


def get_error(url: str) -> bytes:
    import urllib.error

    try:
        return get(url)
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code
        return e.read()


def test_the_page_greys_out_and_says_how_old_it_is_when_the_scheduler_stops(cli, small):
    *_, scheduler = small
    base = start_dashboard(cli)
    driver = browser()
    try:
        driver.get(base + "/")
        wait_page(driver, lambda d: "as of" in text_of(d, "updated"), "the page's age")
        assert "stale" not in driver.find_element("tag name", "body").get_attribute("class")
        os.killpg(scheduler.pid, signal.SIGSTOP)  # the scheduler stops cycling (and publishing)
        try:
            wait_page(driver, lambda d: "stale" in d.find_element("tag name", "body").get_attribute("class"),
                      "the page greyed out", timeout=20)
            said = text_of(driver, "updated")
            assert "ago" in said and "is the scheduler running?" in said, said
            assert "stale" in driver.find_element("id", "live").get_attribute("class")
            grey = driver.execute_script("return getComputedStyle(document.querySelector('main')).opacity")
            assert float(grey) < 1, grey
        finally:
            os.killpg(scheduler.pid, signal.SIGCONT)
        wait_page(driver, lambda d: "stale" not in d.find_element("tag name", "body").get_attribute("class"),
                  "the page live again once the scheduler runs", timeout=30)
    finally:
        driver.quit()

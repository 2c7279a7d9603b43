"""The dashboard's page of ended jobs, live: a job fails on a fake-GPU agent, shows on /finished with its
reason and exit code, is requeued from the page (its confirmation accepted) and runs again, in headless
Chromium (skipped without it locally, as tests/e2e/test_dashboard_live.py says)."""

from __future__ import annotations

import pytest

from tests.e2e.dashboard_kit import browser, start_dashboard, text_of, wait_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_failed_job_is_requeued_from_the_page_of_ended_jobs_and_runs_again(cli, tmp_path):
    mark = tmp_path / "ran-once"
    cli.start("worker", "--node", "gpu-01", "--fake-gpus", "1xA100-80GB", "--work-dir", str(tmp_path / "node"))
    cli.start("scheduler")
    job = cli.submit("--name", "flaky", "--gpus", "1", "--", "sh", "-c",
                     f"if [ -e {mark} ]; then echo second run; else touch {mark}; exit 3; fi")
    cli.wait_for(lambda: cli.show(job)["state"] == "failed", timeout=30, what="the first run to fail")
    base = start_dashboard(cli, "--allow-cancel")
    driver = browser()
    try:
        driver.get(base + "/")
        link = driver.find_element("id", "finished-link")
        link.click()
        wait_page(driver, lambda d: d.current_url.endswith("/finished"), "the page of ended jobs")
        row = f"#finished tr[data-job='{job}']"
        wait_page(driver, lambda d: d.find_elements("css selector", row), f"job {job} among the failed jobs")
        shown = driver.find_element("css selector", row).text
        assert "flaky" in shown and "exit code 3" in shown and "failed" in shown, shown
        driver.find_element("css selector", f"{row} button.requeue").click()
        alert = driver.switch_to.alert
        assert f"Requeue job {job}?" in alert.text
        alert.accept()
        wait_page(driver, lambda d: "requeued" in text_of(d, "r-msg"), "the requeue's outcome")
        cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", timeout=30, what="the second run")
        wait_page(driver, lambda d: not d.find_elements("css selector", row), "the job gone from the failed jobs")
        done = cli.show(job)
        assert [a["outcome"] for a in done["attempts"]] == ["failed", "succeeded"], done["attempts"]
        assert done["requeued_by"] == "anonymous from 127.0.0.1"
        driver.get(f"{base}/job/{job}")
        wait_page(driver, lambda d: "requeued by anonymous from 127.0.0.1" in text_of(d, "timeline"), "the requeue")
        wait_page(driver, lambda d: "requeue job" in text_of(d, "cancel-box"), "the job page's requeue button")
    finally:
        driver.quit()

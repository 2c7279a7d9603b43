"""Opening a Redis connection, with errors a user can act on."""

from __future__ import annotations

from ..errors import ConnectionError as DispatchConnectionError


def connect(url: str, *, check: bool = True):
    """A redis-py client for `url` (bytes responses, as RQ needs). Pings unless check=False."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30)
    except ValueError as e:
        raise DispatchConnectionError(url, str(e)) from None
    if check:
        try:
            client.ping()
        except redis.exceptions.AuthenticationError as e:
            raise DispatchConnectionError(url, f"authentication failed ({e})") from None
        except redis.exceptions.RedisError as e:
            raise DispatchConnectionError(url, str(e) or type(e).__name__) from None
    return client


def text(value) -> str:
    """A Redis reply as str ('' for None)."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def clone(client, **overrides):
    """A new client to the same server with its own pool, e.g. clone(c, socket_timeout=None)
    for a connection that blocks longer than redis-py's default 5 s read timeout."""
    import redis

    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, **overrides}
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))

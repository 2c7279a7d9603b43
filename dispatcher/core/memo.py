"""Remembering pure functions of request values, which repeat across a sweep's jobs."""

from __future__ import annotations

import functools


def remembered(maxsize: int):
    """functools.lru_cache for a pure function of one tuple, except that a tuple holding a value that
    does not hash (a list or map from outside) is worked out each time instead of refused."""
    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(key):
            try:
                return cached(key)
            except TypeError:  # an unhashable key (a TypeError of fn's own is raised again below)
                return fn(key)
        return call
    return wrap

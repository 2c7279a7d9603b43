"""Speed helpers of the pure code: remembering pure functions of request values, which repeat across a
sweep's jobs, and pausing the garbage collector around a batch that makes no cycles."""

from __future__ import annotations

import contextlib
import functools
import gc


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


@contextlib.contextmanager
def gc_paused():
    """Around building and writing a batch of specs: a sweep allocates tens of thousands of objects
    that hold no cycles (specs, their dicts, tuples and strings), and each collection the allocations
    trigger walks them all again (a third of `submit --from`'s time at 20,000 lines)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

"""A job's log stream keeps its latest output up to a cap in bytes (lua/log_append.lua), however the job
wrote it: a line at a time or in large blocks, oldest entries dropped first, at most the cap (but the newest entry always)."""

from __future__ import annotations

from dispatcher.store import keys
from dispatcher.store.logs import read_log
from dispatcher.store.scripts import log_append


def held(client, ns) -> bytes:
    return b"".join(d for _, d in read_log(client, ns, "1"))


def test_a_line_at_a_time_keeps_as_many_bytes_as_large_blocks_do(client, ns):
    for n in range(2000):
        log_append(client, ns, "1", 0, 10_000, 0, [b"%04d\n" % n])
    kept = held(client, ns)
    assert kept.endswith(b"1999\n") and 10_000 - 5 < len(kept) <= 10_000, len(kept)
    assert kept.startswith(b"%04d\n" % (2000 - len(kept) // 5))  # the oldest went, whole entries


def test_each_entry_counts_its_cost_and_a_large_append_drops_what_it_must(client, ns):
    log_append(client, ns, "1", 0, 1000, 100, [b"a" * 10] * 5)  # 5 x (10 + 100) = 550 bytes
    assert held(client, ns) == b"a" * 50
    log_append(client, ns, "1", 0, 1000, 100, [b"b" * 300, b"c" * 200])  # 550 + 400 + 300 > 1000
    assert held(client, ns) == b"a" * 20 + b"b" * 300 + b"c" * 200  # 220 + 400 + 300 = 920 bytes kept
    log_append(client, ns, "1", 0, 1000, 100, [b"d" * 2000])  # larger than the cap alone: only it stays
    assert held(client, ns) == b"d" * 2000


def test_an_older_agents_entries_without_an_offset_go_first(client, ns):
    client.xadd(keys.job_log(ns, "1"), {b"d": b"old\n"})
    log_append(client, ns, "1", 0, 100, 0, [b"n" * 80])
    assert held(client, ns) == b"old\n" + b"n" * 80
    log_append(client, ns, "1", 0, 100, 0, [b"m" * 80])
    assert held(client, ns) == b"m" * 80

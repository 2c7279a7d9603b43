"""The dashboard's gzip: a tail compressed once, a head per answer, joined in one gzip member that
any gzip reader takes whole (views/gzipped.py)."""

from __future__ import annotations

import gzip
import json
import random
import zlib

from dispatcher.views.gzipped import Tail, gzip_join


def test_a_head_and_a_tail_compressed_apart_read_back_as_one_body():
    rng = random.Random(7)
    board = json.dumps({"nodes": [{"name": f"n{i}", "gpus": [{"util_pct": rng.randint(0, 100)} for _ in range(8)]}
                                  for i in range(2000)]}).encode()
    tail = Tail(board[1:])
    for now in (1.5, 2.25, 1e9):  # each answer's own head, the tail's compression kept
        head = json.dumps({"now": now}).encode()[:-1] + b","
        body = gzip_join(head, tail)
        assert gzip.decompress(body) == head + board[1:]
        assert json.loads(zlib.decompressobj(31).decompress(body))["now"] == now  # a streaming reader too
    assert len(body) < len(board) / 5


def test_empty_and_binary_parts_and_a_long_head_round_trip():
    rng = random.Random(1)
    noise = bytes(rng.randrange(256) for _ in range(70_000))  # incompressible: stored blocks
    for head, data in ((b"", b""), (b"", b"# HELP x\n"), (b"{", b""), (noise, noise[::-1]), (b"a" * 100_000, b"b")):
        assert gzip.decompress(gzip_join(head, Tail(data))) == head + data

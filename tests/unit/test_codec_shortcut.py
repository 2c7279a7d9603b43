"""decode_spec's shortcut (store/codec.py _known_shared): a record whose shared part it read before is
decoded from its own fields alone. It must give what reading the whole record gives, for every record:
the real ones of a realistic queue, arrays, dependencies, odd bytes in the shared part, and records
mangled byte by byte (either both readings refuse it, or both give the same spec)."""

import random
import sys
from pathlib import Path

import msgpack
import pytest

from dispatcher.core.errors import MalformedRecord
from dispatcher.core.spec import build_spec
from dispatcher.store import codec
from dispatcher.store.codec import decode_spec, encode_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))


def whole(raw):
    try:
        return codec._decode_whole(raw, "spec")
    except MalformedRecord as e:
        return ("refused", str(e))


def quick(raw):
    try:
        return decode_spec(raw)
    except MalformedRecord as e:
        return ("refused", str(e))


def specs():
    from realqueue import Realistic

    out = list(Realistic("1000x100", 100).arrivals(300, 1_796_600_000_000))
    out += [build_spec(command=["python", "t.py", str(i)], user="ada", submit_ms=1_796_600_000_000 + i,
                       cwd="/home/\u00a2id/x", env=["K=\u00a2id"], gpus=1, after=["7", "9"], name=f"n{i}")
            for i in range(5)]
    element = build_spec(command=["true"], user="bo", submit_ms=1, gpus=2)
    out += [element.filled(array_of="40", array_index=i, array_count=5) for i in range(5)]  # an array's elements
    return out


def test_the_shortcut_gives_what_the_whole_record_gives_and_is_taken():
    codec._SHARED_SEEN.clear()
    raws = [encode_spec(s, str(i)) for i, s in enumerate(specs())]
    first = [quick(r) for r in raws]
    assert first == [whole(r) for r in raws]
    assert all(not isinstance(x, tuple) for x in first)
    assert len(codec._SHARED_SEEN) >= 2
    assert all(codec._known_shared(r) is not None for r in raws)  # the second time, every one by the shortcut
    assert [quick(r) for r in raws] == first


@pytest.mark.parametrize("seed", range(4))
def test_a_mangled_record_reads_the_same_both_ways(seed):
    rng = random.Random(seed)
    codec._SHARED_SEEN.clear()
    raws = [encode_spec(s, str(i)) for i, s in enumerate(specs())]
    for r in raws:
        quick(r)  # the shared parts are known: mangled copies go down the shortcut where they can
    for _ in range(1500):
        b = bytearray(rng.choice(raws))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(b))
            how = rng.random()
            if how < 0.5:
                b[at] = rng.randrange(256)
            elif how < 0.75:
                del b[at]
            else:
                b.insert(at, rng.randrange(256))
        raw = bytes(b)
        got, want = quick(raw), whole(raw)
        assert (got == want) or (isinstance(got, tuple) and isinstance(want, tuple)), (raw, got, want)


def test_an_own_field_that_shadows_a_shared_one_is_never_read_by_the_shortcut():
    # a writer that adds "gpus" after the job's own fields: msgpack's last value wins in the whole read
    codec._SHARED_SEEN.clear()
    spec = build_spec(command=["true"], user="ada", submit_ms=5, gpus=1)
    raw = encode_spec(spec, "1")
    decode_spec(raw)
    total = int.from_bytes(raw[1:3], "big")
    hostile = b"\xde" + (total + 1).to_bytes(2, "big") + raw[3:] + msgpack.packb({"gpus": 8})[1:]
    assert quick(hostile) == whole(hostile) and quick(hostile).gpus == 8

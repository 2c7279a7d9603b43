"""An interactive job's record and the signatures of its keystrokes (store/codec.py, store/tty.py): a spec
keeps its interactive mode and idle timeout, a record from before them reads as a batch job, and under
identity the agent takes an input entry only from the job's user or an admin, recent, and never twice."""

from __future__ import annotations

import time

import msgpack
import pytest

from dispatcher.auth.identity import Verifier, token_for
from dispatcher.core.errors import MalformedRecord
from dispatcher.core.model import JobSpec
from dispatcher.store.codec import decode_spec, encode_spec
from dispatcher.store.tty import Signer, input_ok

SECRET = b"s" * 32
VERIFIER = Verifier(SECRET, admins=("boss",))


def test_a_shell_spec_keeps_its_mode_and_idle_timeout_and_an_old_record_is_a_batch_job():
    shell = JobSpec(id="7", command=("/bin/zsh",), gpus=1, interactive="shell", idle_timeout_s=3600.0)
    assert decode_spec(encode_spec(shell)) == shell
    old = msgpack.unpackb(encode_spec(JobSpec(id="8", command=("true",))))
    del old["tty"], old["tty_idle_s"]  # written before interactive sessions
    spec = decode_spec(msgpack.packb(old))
    assert (spec.interactive, spec.idle_timeout_s) == ("", None)
    old["tty"] = "vnc"
    with pytest.raises(MalformedRecord, match="bad interactive mode"):
        decode_spec(msgpack.packb(old))


def entry(signer: Signer, kind: str = "in", data: bytes = b"ls\r") -> dict:
    """An in-stream entry as the agent reads it (raw fields)."""
    f = {"k": kind, "d": data, **signer.fields(kind, data)}
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in f.items()}


def test_the_owners_signed_keystrokes_pass_once_and_an_admins_too():
    seen: dict = {}
    alice = Signer("alice", token_for(SECRET, "alice"), "12")
    first, second = entry(alice), entry(alice, data=b"exit\r")
    assert input_ok(VERIFIER, "alice", "12", first, seen)
    assert not input_ok(VERIFIER, "alice", "12", first, seen)  # a replay
    assert input_ok(VERIFIER, "alice", "12", second, seen)
    assert input_ok(VERIFIER, "alice", "12", entry(Signer("boss", token_for(SECRET, "boss"), "12")), seen)


def test_another_users_a_forged_a_moved_or_an_old_entry_is_dropped():
    bob = Signer("bob", token_for(SECRET, "bob"), "12")
    assert not input_ok(VERIFIER, "alice", "12", entry(bob), {})  # signed, but not the owner's
    forger = Signer("alice", "0" * 64, "12")
    assert not input_ok(VERIFIER, "alice", "12", entry(forger), {})
    alice = Signer("alice", token_for(SECRET, "alice"), "12")
    assert not input_ok(VERIFIER, "alice", "13", entry(alice), {})  # signed for job 12
    changed = entry(alice)
    changed[b"d"] = b"rm -rf ~\r"
    assert not input_ok(VERIFIER, "alice", "12", changed, {})
    stale = entry(alice)
    stale[b"t"] = str(time.time() - 3600).encode()
    assert not input_ok(VERIFIER, "alice", "12", stale, {})
    assert not input_ok(VERIFIER, "alice", "12", {b"k": b"in", b"d": b"ls\r"}, {})  # unsigned

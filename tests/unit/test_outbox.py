"""The agent's outbox (workers/outbox.py): what Redis did not take yet, on disk and in memory; a disk that
refuses an entry costs its copy on disk, never the entry (a job's end dropped there ran the job again)."""

import msgpack

from workers.outbox import Outbox


def test_an_entry_is_kept_on_disk_and_read_back_by_the_next_agent(tmp_path):
    box = Outbox(tmp_path)
    box.add("finish", "7", 2, "succeeded", 0, "", {"at_ms": 5})
    (path,) = (tmp_path / "outbox").glob("*.entry")
    assert msgpack.unpackb(path.read_bytes(), raw=False) == ["finish", "7", 2, "succeeded", 0, "", {"at_ms": 5}]
    again = Outbox(tmp_path)
    assert again.attempts() == {("7", 2)} and len(again) == 1


def test_an_entry_the_disk_refuses_is_kept_in_memory_and_replayed_from_there(tmp_path, caplog):
    work = tmp_path / "work"
    work.mkdir()
    (work / "outbox").write_text("a file where the folder goes: every write fails, as on a full disk")
    box = Outbox(work)
    box.add("log", "7", 2, b"last words", 0)
    box.add("finish", "7", 2, "succeeded", 0, "", {"at_ms": 5})
    assert box.holds("7", 2) and len(box) == 2  # reconcile leaves the attempt be: its end is on its way
    path, entry = box.first()
    assert entry == ("log", "7", 2, b"last words", 0)
    box.done(path)
    assert box.first()[1][0] == "finish"
    assert "kept in memory only" in caplog.text

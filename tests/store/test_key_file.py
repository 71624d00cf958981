"""The key file beside a SQLite store: created once with a notice, refused unless private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from memorybook.store import MemoryStoreKeyError, SQLiteMemoryStore
from tests.helpers import make_memory, new_key, ticket_ids


@pytest.fixture(autouse=True)
def no_key_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store here is given no key, so its key file is what the test is about."""
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)


def test_a_wrong_key_is_pointed_at_the_key_file_only_when_there_is_one(tmp_path: Path) -> None:
    for given in (None, new_key()):  # a key file made, or the key given and no file
        path = tmp_path / f"{'given' if given else 'file'}.sqlite3"
        with SQLiteMemoryStore(path, key=given) as store:
            store.save("C-1042", make_memory("C-1042", "T-1"))
        with pytest.raises(MemoryStoreKeyError, match="did not encrypt") as raised:
            SQLiteMemoryStore(path, key=new_key())
        named = f"the key file {path}.key" in str(raised.value)
        assert named is (given is None), (
            "a wrong key's message names the key file among the places the right one may be "
            "kept when it exists, and only then (key_hint() in memorybook/store/sqlite.py): "
            f"{raised.value}")


def test_local_key_file_is_created_with_notice_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    key_path = tmp_path / "memories.sqlite3.key"
    with SQLiteMemoryStore(path) as store:
        assert key_path.exists()
        assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
        assert len(store.notices) == 1
        assert str(key_path) in store.notices[0]
        assert "lost" in store.notices[0]
        store.save("C-1042", make_memory("C-1042", "T-1"))
    key_text = key_path.read_text()
    with SQLiteMemoryStore(path) as store:
        assert store.notices == []
        assert len(store.recall("C-1042")) == 1
    assert key_path.read_text() == key_text
    with SQLiteMemoryStore(path, key=key_text) as store:
        assert len(store.recall("C-1042")) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "memories.sqlite3",
        "memories.sqlite3.key",
    ]


def test_missing_key_file_for_existing_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    (tmp_path / "memories.sqlite3.key").unlink()
    with pytest.raises(MemoryStoreKeyError, match="key file .* is missing"):
        SQLiteMemoryStore(path)
    assert not (tmp_path / "memories.sqlite3.key").exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o666])
def test_a_key_file_others_can_read_or_write_is_refused_until_made_private(
    tmp_path: Path, mode: int
) -> None:
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    key_path = path.with_name(path.name + ".key")
    key_path.chmod(mode)
    with pytest.raises(MemoryStoreKeyError) as raised:
        SQLiteMemoryStore(path)
    assert f"chmod 600 {key_path}" in str(raised.value)
    assert f"{mode:04o}" in str(raised.value)
    key_path.chmod(0o600)
    with SQLiteMemoryStore(path) as store:
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]


def test_a_key_file_planted_by_another_user_beside_a_new_store_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memories.sqlite3"
    planted = path.with_name(path.name + ".key")
    planted.write_text(new_key() + "\n")
    planted.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(planted, 65534, 65534)  # nobody
    else:  # only root may give a file away: the key file, and it alone, reads as another's
        monkeypatch.setattr(os, "fstat", owned_by_another_user(planted, os.fstat))
    with pytest.raises(MemoryStoreKeyError, match="owned by another user") as raised:
        SQLiteMemoryStore(path)
    assert str(planted) in str(raised.value)


def owned_by_another_user(path: Path, fstat):
    """`os.fstat`, but the file at `path` reads as owned by the next uid after its owner's.

    Not `os.geteuid` faked instead: the database file the store makes would then read as
    another user's too, and be refused before the key file is read."""
    planted = path.stat()

    def fstat_with_another_owner(descriptor: int) -> os.stat_result:
        status = fstat(descriptor)
        if (status.st_dev, status.st_ino) != (planted.st_dev, planted.st_ino):
            return status
        fields = list(status)
        fields[4] = status.st_uid + 1  # st_uid
        return os.stat_result(fields)

    return fstat_with_another_owner


def test_a_new_key_file_never_follows_links_planted_where_it_is_made(tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    victim = tmp_path / "someone-elses-file"
    victim.write_bytes(b"")
    victim.chmod(0o666)
    if os.geteuid() == 0:
        os.chown(victim, 65534, 65534)  # nobody
    for pid in {os.getpid(), *range(os.getpid() - 50, os.getpid() + 50)}:
        (tmp_path / f"memories.sqlite3.key.{pid}.draft").symlink_to(victim)
    with SQLiteMemoryStore(path) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        assert "readable only by you" in store.notices[0]
    assert victim.read_bytes() == b""
    key_path = path.with_name(path.name + ".key")
    status = key_path.lstat()
    assert stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid()
    assert stat.S_IMODE(status.st_mode) == 0o600 and status.st_nlink == 1
    assert status.st_ino != victim.stat().st_ino
    with SQLiteMemoryStore(path) as store:
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]


def test_a_link_planted_as_the_key_file_of_a_new_store_is_refused_and_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memories.sqlite3"
    key_path = path.with_name(path.name + ".key")
    elsewhere = tmp_path / "not-there-yet"
    key_path.symlink_to(elsewhere)
    with pytest.raises(MemoryStoreKeyError, match="Cannot read the key file"):
        SQLiteMemoryStore(path)
    assert key_path.is_symlink() and not elsewhere.exists()


def test_where_files_have_no_owner_or_mode_bits_the_key_file_is_read_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows: no owner ids or group and other mode bits to check (the README says so)."""
    from memorybook.store import key_file

    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    (tmp_path / "memories.sqlite3.key").chmod(0o644)  # as every file there reads
    monkeypatch.setattr(key_file, "OWNERS_AND_MODES", False)
    with SQLiteMemoryStore(path) as store:
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]


def test_a_folder_without_hard_links_gets_its_key_file_made_exclusively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAT and some network shares refuse link(): the key file is then created in place."""
    def no_hard_links(*args, **kwargs):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_hard_links)
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    key_path = tmp_path / "memories.sqlite3.key"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memories.sqlite3", key_path.name]
    with SQLiteMemoryStore(path) as store:
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]

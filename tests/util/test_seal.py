"""Seals on recorded evidence: a MAC that changes with every byte, a key made once and kept private."""

from __future__ import annotations

import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent.util.seal import (KEY_FILE, SealError, is_sealed, load_key, mac_path, read_sealed, seal_of, sign, verify,
                             write_sealed, write_sealed_json)

KEY = bytes(range(32))


def test_a_mac_verifies_its_bytes_under_its_key_only():
    data = b'[{"evidence": {"changes": true}}]\n'
    mac = sign(KEY, data)
    assert len(mac) == 64 and verify(KEY, data, mac) and verify(KEY, data, mac + "\n")
    assert not verify(KEY, data.replace(b"true", b"false"), mac)
    assert not verify(bytes(32), data, mac)
    assert not verify(KEY, data, "")
    assert seal_of(data, None, KEY) == "unsealed"
    assert seal_of(data, mac, KEY) == "sealed"
    assert seal_of(data + b" ", mac, KEY) == "broken"


def test_a_sealed_file_reads_back_and_an_edited_or_unsealed_one_does_not(tmp_path):
    f = tmp_path / "checks.json"
    write_sealed_json(f, [{"n": 1}], KEY)
    assert json.loads(read_sealed(f, KEY)) == [{"n": 1}] and is_sealed(f, KEY)
    write_sealed_json(f, [{"n": 1}, {"n": 2}], KEY)  # an entry appended: the whole list is sealed anew
    assert json.loads(read_sealed(f, KEY)) == [{"n": 1}, {"n": 2}]

    f.write_text(f.read_text().replace('"n": 2', '"n": 3'))
    with pytest.raises(SealError, match=r"checks.json: has a MAC that does not verify .*: re-run the check$"):
        read_sealed(f, KEY)
    write_sealed(f, "[]\n", KEY)
    with pytest.raises(SealError, match="does not verify"):
        read_sealed(f, bytes(32))  # another machine's key
    mac_path(f).unlink()
    with pytest.raises(SealError, match="carries no MAC from this machine's perfagent"):
        read_sealed(f, KEY)
    assert not is_sealed(f, KEY) and not is_sealed(tmp_path / "missing.json", KEY)
    with pytest.raises(OSError):
        read_sealed(tmp_path / "missing.json", KEY)


def test_the_key_is_made_once_private_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFAGENT_HOME", str(tmp_path / "home"))
    with ThreadPoolExecutor(8) as pool:  # first use from many writers at once: one key, all see it
        keys = set(pool.map(lambda _: load_key(), range(16)))
    assert len(keys) == 1 and len(next(iter(keys))) == 32
    path = tmp_path / "home" / KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path / "home") == [KEY_FILE]  # no temporary file left beside it
    assert load_key() == path.read_bytes() == load_key(tmp_path / "home")
    assert load_key(tmp_path / "other") != load_key()

    f = tmp_path / "r.json"
    write_sealed(f, "{}\n")  # the default key is the one in PERFAGENT_HOME
    assert read_sealed(f, path.read_bytes()) == b"{}\n"

    path.write_bytes(b"short")
    with pytest.raises(SealError, match=r"evidence.key: not an evidence key \(5 bytes, not 32\)"):
        load_key()

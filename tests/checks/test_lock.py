"""The perf device lock: the suite's own lock folder, and a wait that says who holds the lock since when."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from agent.checks import lock
from agent.checks.lock import device_lock, lock_path


def test_the_suite_does_not_use_the_user_wide_lock_dir():
    # tests/conftest.py points PERFAGENT_LOCK_DIR at a folder of this session's own
    assert os.environ.get("PERFAGENT_LOCK_DIR")
    assert lock.default_lock_dir() == Path(os.environ["PERFAGENT_LOCK_DIR"])
    assert "perfagent/locks" not in str(lock.default_lock_dir().expanduser())


def test_the_default_honours_the_environment(tmp_path):
    code = "from agent.checks.lock import default_lock_dir; print(default_lock_dir())"
    env = {**os.environ, "PERFAGENT_LOCK_DIR": str(tmp_path / "mine")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "mine")
    env.pop("PERFAGENT_LOCK_DIR")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "~/.cache/perfagent/locks"


def test_the_lock_folder_is_read_when_a_lock_is_taken_not_at_import(tmp_path, monkeypatch):
    # set after agent.checks.lock (and collect, and the checker) were imported: the lock still lands there
    monkeypatch.setenv("PERFAGENT_LOCK_DIR", str(tmp_path / "later"))
    with device_lock("cpu") as path:
        assert path == tmp_path / "later" / "cpu.lock" and path.exists()


def test_the_holder_writes_who_it_is_and_a_waiter_says_so(tmp_path):
    messages: list[str] = []
    got = threading.Event()
    with device_lock("cpu", tmp_path) as path:
        info = json.loads(path.read_text())
        assert info["pid"] == os.getpid() and abs(info["since"] - time.time()) < 60 and info["command"]

        def second():
            with device_lock("cpu", tmp_path, log=messages.append):
                got.set()
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        assert not got.is_set()
    t.join(5)
    assert got.is_set()
    (msg,) = messages
    assert f"held by pid {os.getpid()} since " in msg and "s ago)" in msg and str(lock_path(tmp_path, "cpu")) in msg
    assert lock_path(tmp_path, "cpu").read_text() == ""  # released: no stale holder left in the file


def test_a_holder_that_wrote_nothing_is_still_a_clear_message(tmp_path):
    path = lock_path(tmp_path, "cuda:0")
    path.write_text("")
    with open(path, "a+") as f:
        assert "another measurement is running" in lock.holder(f)
    path.write_text(json.dumps({"pid": 42, "since": 1000.0, "command": "perfagent run t.toml"}))
    with open(path, "a+") as f:
        said = lock.holder(f, now=1000.0 + 300)
    assert said.startswith("held by pid 42 since ") and "(5.0 min ago): perfagent run t.toml" in said


def test_a_long_wait_says_so_again_as_it_goes(tmp_path):
    """A wait of minutes is not one line that never changes: it ticks, with the time waited so far."""
    messages: list[str] = []

    def wait():
        with device_lock("cpu", tmp_path, log=messages.append, tick_s=0.3):
            pass

    with device_lock("cpu", tmp_path):
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(1.0)
    t.join(5)
    assert len(messages) >= 3, messages
    assert "so far" not in messages[0] and all(", 0s so far" in m or ", 1s so far" in m for m in messages[1:]), messages

from __future__ import annotations

import os
import subprocess
import time

import pytest

from agent.sandbox import base_env, isolation_mode, run_command


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); treat it as dead
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def test_exit_code_output_and_duration(tmp_path):
    res = run_command("echo out; echo err >&2; exit 3", tmp_path)
    assert res.exit_code == 3 and not res.ok and not res.timed_out
    assert "out" in res.output and "err" in res.output
    assert res.duration_s >= 0


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    res = run_command(f"sleep 60 & echo $! > {pidfile}; sleep 60", tmp_path, timeout_s=1)
    assert res.timed_out and not res.ok
    assert time.monotonic() - start < 10
    child = int(pidfile.read_text())
    for _ in range(50):
        if not alive(child):
            break
        time.sleep(0.1)
    assert not alive(child), "the background child survived the timeout"


def test_background_child_cannot_hang_a_finished_command(tmp_path):
    start = time.monotonic()
    res = run_command("(sleep 30 &) ; echo done", tmp_path, timeout_s=20)
    assert res.ok and "done" in res.output
    assert time.monotonic() - start < 10


def test_output_is_capped_keeping_head_and_tail(tmp_path):
    res = run_command("echo FIRST; head -c 200000 /dev/zero | tr '\\0' x; echo; echo LAST", tmp_path, max_output=1000)
    assert res.output.startswith("FIRST") and res.output.rstrip().endswith("LAST")
    assert res.cut_bytes > 190_000 and f"{res.cut_bytes} bytes of output cut" in res.output
    assert len(res.output) < 1200


def test_environment_is_controlled(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    res = run_command("env", tmp_path, env=base_env({"EXTRA": "1"}))
    assert "sk-secret" not in res.output and "EXTRA=1" in res.output
    py = run_command("python -c 'import sys; print(sys.executable)'", tmp_path)
    assert py.ok


@pytest.mark.skipif(isolation_mode() == "none", reason="no bwrap and no unshare -n on this machine")
def test_no_network(tmp_path):
    probe = "python -c \"import socket; s=socket.socket(); s.settimeout(2); s.connect(('127.0.0.1', 9))\""
    res = run_command(probe, tmp_path)
    assert res.isolation in ("bwrap", "unshare")
    assert "Network is unreachable" in res.output  # not even loopback is up
    with_net = run_command("true", tmp_path, network=True)
    assert with_net.isolation == "none"

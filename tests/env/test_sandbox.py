from __future__ import annotations

import os
import resource
import socket
import time

import pytest

from agent.env.sandbox import SandboxSpec, base_env, isolation, run_command

sealed = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")


def still_written(path, wait=0.6) -> bool:
    """True if something keeps appending to `path` (a process outlived its command)."""
    before = path.stat().st_size if path.exists() else 0
    time.sleep(wait)
    return (path.stat().st_size if path.exists() else 0) != before


def test_exit_code_output_and_duration(tmp_path):
    res = run_command("echo out; echo err >&2; exit 3", tmp_path)
    assert res.exit_code == 3 and not res.ok and not res.timed_out
    assert "out" in res.output and "err" in res.output
    assert res.duration_s >= 0


def test_timeout_kills_every_process(tmp_path):
    start = time.monotonic()
    res = run_command("(while true; do echo x >> beat; sleep 0.05; done) & sleep 60", tmp_path, timeout_s=1)
    assert res.timed_out and not res.ok
    assert time.monotonic() - start < 10
    assert not still_written(tmp_path / "beat"), "the background child survived the timeout"


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


def test_huge_output_costs_bounded_memory(tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = run_command("yes | head -c 300000000; echo END", tmp_path, max_output=2000)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.ok and res.cut_bytes > 299_000_000 and res.output.rstrip().endswith("END")
    assert grown_mb < 50, f"the harness grew by {grown_mb:.0f} MB reading 300 MB of output"


def test_environment_is_controlled(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    res = run_command("env", tmp_path, env=base_env({"EXTRA": "1"}))
    assert "sk-secret" not in res.output and "EXTRA=1" in res.output
    py = run_command("python -c 'import sys; print(sys.executable)'", tmp_path)
    assert py.ok


@sealed
def test_no_network_not_even_the_hosts_loopback(tmp_path):
    """Holds whether loopback is up or not, on the host (no listener then) and in the sandbox
    (refused or unreachable): the command cannot connect, and a host listener never sees it."""
    try:
        server: socket.socket | None = socket.create_server(("127.0.0.1", 0))
    except OSError:  # no loopback on this host
        server = None
    port = server.getsockname()[1] if server else 9
    try:
        probe = f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
        res = run_command(probe, tmp_path)
        if server is not None:
            server.settimeout(0.5)
            with pytest.raises(TimeoutError):
                server.accept()
    finally:
        if server is not None:
            server.close()
    assert res.isolation == "bwrap" and not res.ok
    assert any(why in res.output for why in ("Connection refused", "unreachable", "Cannot assign requested address"))


@sealed
def test_only_the_workspace_and_a_private_tmp_are_writable(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    res = run_command(f"echo a > {outside}/x; echo b > /tmp/x && cat /tmp/x; echo c > here", ws)
    assert not (outside / "x").exists()
    assert "b" in res.output and (ws / "here").read_text() == "c\n"
    assert run_command("cat /tmp/x", ws).exit_code != 0, "the private /tmp must not outlive its command"
    extra = tmp_path / "extra"
    extra.mkdir()
    assert run_command(f"echo d > {extra}/y", ws, sandbox=SandboxSpec(writable=(extra,))).ok and (extra / "y").exists()


@sealed
def test_workspace_git_is_read_only(tmp_path):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    res = run_command("echo evil > .git/hooks/pre-commit; git config core.fsmonitor evil", tmp_path)
    assert not (tmp_path / ".git" / "hooks" / "pre-commit").exists()
    assert "Read-only" in res.output


@sealed
def test_home_folders_are_hidden(tmp_path):
    home = os.path.expanduser("~")
    secret = os.path.join(home, ".perfagent-test-secret")
    with open(secret, "w") as f:
        f.write("TOP-SECRET")
    try:
        res = run_command(f"cat {secret}; python -c 'print(1 + 1)'", tmp_path)
    finally:
        os.unlink(secret)
    assert "TOP-SECRET" not in res.output
    assert "2" in res.output, "the interpreter under the hidden home must still work"


@sealed
def test_no_harness_process_is_visible_or_reachable(tmp_path):
    me = os.getpid()
    res = run_command(f"ls /proc | grep -c '^[0-9]'; cat /proc/{me}/environ; kill -9 {me}; "
                      f"nsenter -t {me} -n true && echo ENTERED; grep CapEff /proc/self/status", tmp_path,
                      env=base_env({"SECRET_MARK": "x"}))
    assert int(res.output.split()[0]) < 10  # the sandbox's own few processes
    assert "ENTERED" not in res.output
    assert "CapEff:\t0000000000000000" in res.output


@sealed
def test_daemons_die_with_the_command(tmp_path):
    res = run_command("setsid -f sh -c 'while true; do echo x >> beat; sleep 0.05; done'; "
                      "(sh -c 'while true; do echo y >> beat2; sleep 0.05; done' &) ; sleep 0.3", tmp_path)
    assert res.ok
    assert (tmp_path / "beat").exists() and (tmp_path / "beat2").exists()
    assert not still_written(tmp_path / "beat") and not still_written(tmp_path / "beat2")


@sealed
def test_file_size_limit(tmp_path):
    from agent.env.sandbox import ResourceLimits

    limits = ResourceLimits(memory_bytes=4 << 30, file_bytes=1 << 20)
    res = run_command("head -c 5000000 /dev/zero > big; echo rc=$?", tmp_path, sandbox=SandboxSpec(limits=limits))
    assert (tmp_path / "big").stat().st_size <= 1 << 20
    assert "rc=0" not in res.output


@sealed
def test_tools_on_path_under_a_hidden_folder_stay_usable(tmp_path):
    """A venv or tool folder in /tmp (a CI checkout, say) is mounted back read-only, not hidden."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "mytool").write_text("#!/bin/sh\necho tool-ran\n")
    (tools / "mytool").chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    env = base_env()
    env["PATH"] = f"{tools}:{env['PATH']}"
    res = run_command(f"mytool; touch {tools}/x", ws, env=env)
    assert "tool-ran" in res.output and not (tools / "x").exists()


KEYRING_PROBE = '''import ctypes, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
KEYCTL_SEARCH, USER_KEYRING = 10, ctypes.c_long(-4)
name = sys.argv[1].encode()
if libc.syscall(keyctl, KEYCTL_SEARCH, USER_KEYRING, b"user", name, 0) >= 0:
    print("FOUND")
elif libc.syscall(add_key, b"user", name, b"cached result", 13, USER_KEYRING) >= 0:
    print("STORED")
else:
    print("REFUSED", ctypes.get_errno())
'''


@sealed
@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="no syscall table for this machine")
def test_a_command_cannot_keep_a_key_in_the_kernel_keyring(tmp_path):
    """Attack: a bench caches its result in the user keyring (the uid's, shared by every sandbox and the
    host) on its first run and finds it on its next, or leaves a key the harness's own processes see."""
    import ctypes

    (tmp_path / "probe.py").write_text(KEYRING_PROBE)
    name = f"perfagent-redteam-{os.getpid()}"
    libc = ctypes.CDLL(None)
    libc.syscall.restype = ctypes.c_long
    keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
    try:
        first = run_command(f"python probe.py {name}", tmp_path, timeout_s=60)
        second = run_command(f"python probe.py {name}", tmp_path, timeout_s=60)
        on_host = libc.syscall(keyctl, 10, ctypes.c_long(-4), b"user", name.encode(), 0)
    finally:
        key = libc.syscall(keyctl, 10, ctypes.c_long(-4), b"user", name.encode(), 0)
        if key >= 0:
            libc.syscall(keyctl, 21, ctypes.c_long(key))  # KEYCTL_INVALIDATE: leave nothing behind
    assert "REFUSED 1" in first.output, first.output  # EPERM from the seccomp filter
    assert "FOUND" not in second.output and on_host < 0, "a key outlived its sandbox"


@sealed
def test_a_relative_path_entry_does_not_show_the_harness_folder(tmp_path, monkeypatch):
    """PATH=".:..." must not mount whatever folder perfagent runs in (the user's checkout, its results)."""
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "secret.txt").write_text("HARNESS-FOLDER-SECRET")
    monkeypatch.chdir(harness)
    ws = tmp_path / "ws"
    ws.mkdir()
    env = base_env()
    env["PATH"] = f".::{env['PATH']}"
    res = run_command(f"cat {harness}/secret.txt", ws, env=env)
    assert "HARNESS-FOLDER-SECRET" not in res.output


BUSY = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"


@pytest.mark.skipif(isolation().mode != "bwrap", reason="CPU time is complete only in bwrap's PID namespace")
def test_cpu_time_of_the_command_and_what_it_started_is_measured_from_outside(tmp_path):
    (tmp_path / "busy.py").write_text(BUSY)
    busy = run_command("python busy.py", tmp_path, account_cpu=True)
    idle = run_command("sleep 0.3", tmp_path, account_cpu=True)
    assert busy.cpu_s is not None and busy.cpu_s >= 0.28 and idle.cpu_s is not None and idle.cpu_s < 0.1
    assert busy.wall_s is not None and busy.wall_s <= busy.duration_s
    # the busy process in the background, never waited for by the command (the sandbox's init reaps it)
    background = run_command("(python busy.py; touch done) & while [ ! -e done ]; do sleep 0.05; done",
                             tmp_path, account_cpu=True)
    assert run_command("python busy.py", tmp_path).cpu_s is None  # not asked: no reaper
    assert background.cpu_s is not None and background.cpu_s >= 0.28, background.cpu_s


@pytest.mark.skipif(isolation().mode != "bwrap", reason="the CPU-accounting reaper sits in front of bubblewrap only")
def test_a_command_accounted_for_cpu_dies_with_its_harness(tmp_path):
    """The reaper that accounts a bench's CPU time is the sandbox's parent: killed with perfagent (kill -9),
    it takes the sandbox with it instead of leaving the command running for ever."""
    import signal
    import subprocess
    import sys

    marker = f"perfagent-orphan-{os.getpid()}-{time.monotonic_ns()}"
    harness = subprocess.Popen([sys.executable, "-c", (
        "from agent.env.sandbox import run_command\n"
        f"run_command('exec -a {marker} sleep 60', {str(tmp_path)!r}, account_cpu=True, timeout_s=120)\n")])
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-f", f"^{marker} 60"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.1)
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", f"^{marker} 60"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the sandboxed command outlived its harness"
        time.sleep(0.1)

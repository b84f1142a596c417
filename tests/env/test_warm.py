"""Warm interpreters: a forked child behaves like a fresh `python script.py`, and a hostile one
can neither outlive its run nor reach the server that forks the next sample."""

from __future__ import annotations

import time

import pytest

from agent.env.sandbox import base_env, isolation, run_command
from agent.env.warm import PythonCommand, WarmPython, parse_python

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap", reason="warm interpreters need bubblewrap")

SHOW = """import os, sys
print(__name__, sys.argv, os.getcwd(), sys.path[0], os.environ.get("MARK"), "torch" in sys.modules)
"""


@pytest.fixture
def server(tmp_path):
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "show.py").write_text(SHOW)
    w = WarmPython("python", tmp_path, env=base_env({"PYTHONPATH": str(tmp_path)}), preload=("json",))
    yield w, tmp_path
    w.close()


def test_parse_python_takes_plain_invocations_only():
    assert parse_python("python bench/b.py --n 3") == PythonCommand("python", ("bench/b.py", "--n", "3"), False)
    assert parse_python("python3 -u -m pytest -q -x tests") == PythonCommand("python3", ("pytest", "-q", "-x", "tests"),
                                                                              True)
    assert parse_python("/opt/venv/bin/python3.11 b.py").interpreter == "/opt/venv/bin/python3.11"
    for cold in ("python -c 'import x'", "python b.py | tee log", "FOO=1 python b.py", "python b.py; rm -rf x",
                 "bash run.sh", "python", "python -X dev b.py", "python $(pwd)/b.py", "pytest -q"):
        assert parse_python(cold) is None, cold


def test_a_forked_child_sees_what_a_fresh_process_sees(server):
    w, root = server
    cold = run_command("python tool/show.py a 'b c'", root, env=base_env({"PYTHONPATH": str(root), "MARK": "1"}))
    warm = w.run(parse_python("python tool/show.py a 'b c'"), timeout_s=30, env={"MARK": "1"})
    assert warm.exit_code == 0 and warm.output == cold.output, (warm.output, cold.output)
    assert w.run(parse_python("python tool/show.py"), timeout_s=30).output.split()[-2] == "None", \
        "an environment change is the child's alone"
    (root / "mod.py").write_text("import sys\nprint('as module', __name__)\nsys.exit(3)\n")
    res = w.run(parse_python("python -m mod"), timeout_s=30)
    assert res.exit_code == 3 and "as module __main__" in res.output


def test_errors_timeouts_and_floods_are_the_childs_and_the_server_goes_on(server):
    w, root = server
    (root / "boom.py").write_text("raise ValueError('no')\n")
    (root / "hang.py").write_text("import time\ntime.sleep(60)\n")
    (root / "flood.py").write_text("import sys\nfor i in range(200000):\n    print('x' * 50)\n")
    res = w.run(parse_python("python boom.py"), timeout_s=30)
    assert res.exit_code == 1 and "ValueError: no" in res.output
    t = time.monotonic()
    res = w.run(parse_python("python hang.py"), timeout_s=1)
    assert res.timed_out and time.monotonic() - t < 10
    res = w.run(parse_python("python flood.py"), timeout_s=30, max_output=2000)
    assert res.exit_code == 0 and res.cut_bytes > 1_000_000 and len(res.output) < 3000
    assert w.run(parse_python("python tool/show.py"), timeout_s=30).exit_code == 0


def test_a_sample_cannot_leave_a_process_running_into_the_next(server):
    """A hostile bench forks a detached busy child (it would slow whatever side runs next)."""
    w, root = server
    beacon = root / "beacon"
    (root / "daemon.py").write_text(f"""import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            with open({str(beacon)!r}, "a") as f:
                f.write("x")
            time.sleep(0.02)
    os._exit(0)
time.sleep(0.2)
""")
    assert w.run(parse_python("python daemon.py"), timeout_s=30).exit_code == 0
    size = beacon.stat().st_size
    time.sleep(0.5)
    assert beacon.stat().st_size == size, "the detached child kept running after its run ended"


def test_a_child_cannot_write_the_servers_memory(server):
    """The server forks every later sample; a child that patched it would reach them all."""
    w, root = server
    (root / "poke.py").write_text("""import os
try:
    with open(f"/proc/{os.getppid()}/mem", "r+b") as f:
        print("OPENED")
except OSError as e:
    print("DENIED", type(e).__name__)
""")
    res = w.run(parse_python("python poke.py"), timeout_s=30)
    assert "DENIED" in res.output and "OPENED" not in res.output, res.output


def test_a_child_that_kills_the_server_ends_only_that_server(tmp_path):
    (tmp_path / "kill.py").write_text("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n")
    w = WarmPython("python", tmp_path, env=base_env(), preload=())
    try:
        from agent.env.warm import WarmError

        with pytest.raises(WarmError):
            w.run(parse_python("python kill.py"), timeout_s=30)
        with pytest.raises(WarmError):
            w.run(parse_python("python kill.py"), timeout_s=30)
    finally:
        w.close()


def test_a_server_outlives_the_thread_that_first_used_it(tmp_path):
    """The checks run plain and poisoned tests from pool threads that end; bwrap's --die-with-parent
    follows the starting thread, so a server started there would die with it."""
    import threading

    from agent.checks.correctness import check_env, install_hook
    from agent.checks.launch import Launcher

    (tmp_path / "hi.py").write_text("print('hi')\n")
    said: list[str] = []
    launcher = Launcher(tmp_path, check_env(tmp_path, install_hook(tmp_path / "hook")), log=said.append)
    try:
        t = threading.Thread(target=lambda: launcher.run("python hi.py", timeout_s=30))
        t.start()
        t.join()
        time.sleep(0.5)
        res = launcher.run("python hi.py", timeout_s=30)
        assert res.ok and res.output.strip() == "hi" and not said, said
        assert [s for s in launcher._servers.values() if s is not None and s.proc.poll() is None], "still running"
    finally:
        launcher.close()


def test_a_server_refuses_to_serve_while_another_process_holds_its_pipes(tmp_path):
    """The server's own check before it serves: any process whose fds show its control pipes (as
    bwrap's init's did) could read its requests and forge its replies, so it names it and stops."""
    import os
    import subprocess

    from agent.env import zygote

    r, w = os.pipe()
    try:
        assert not zygote._holders((r, w)), "the server itself is not another holder"
        other = subprocess.Popen(["sleep", "30"], pass_fds=(r,))
        try:
            held = zygote._holders((r, w))
        finally:
            other.kill()
            other.wait()
        assert held == [f"/proc/{other.pid}/fd/{r}"], held
    finally:
        os.close(r)
        os.close(w)


BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"


def test_the_server_reports_each_childs_wall_and_cpu_time_from_outside(server):
    """What agent.checks.confirm holds a bench's metric against: the kernel's CPU accounting and the
    server's clock, both out of the child's reach."""
    w, root = server
    (root / "busy.py").write_text(BUSY.format(s=0.3))
    (root / "idle.py").write_text("import time\ntime.sleep(0.3)\n")
    busy = w.run(parse_python("python busy.py"), timeout_s=30)
    idle = w.run(parse_python("python idle.py"), timeout_s=30)
    assert busy.cpu_s is not None and idle.cpu_s is not None and busy.wall_s and idle.wall_s
    assert busy.cpu_s >= 0.28 and idle.cpu_s < 0.1, (busy.cpu_s, idle.cpu_s)
    assert 0.28 <= busy.wall_s < 2 and 0.28 <= idle.wall_s < 2, (busy.wall_s, idle.wall_s)


def test_work_left_to_an_orphan_is_still_counted(server):
    """A bench that hands its work to a process it never waits for, which prints the metric after
    the bench exited: the orphan's CPU time and its output's time are the bench's."""
    w, root = server
    (root / "orphan.py").write_text("import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
                                    + "".join("    " + line + "\n" for line in BUSY.format(s=0.3).splitlines())
                                    + "    print('late', flush=True)\n    os._exit(0)\nos._exit(0)\n")
    res = w.run(parse_python("python orphan.py"), timeout_s=30)
    # the orphan is swept 0.5 s after the bench exits: under load it has had less than its 0.3 s by then,
    # but far more than the bench's own few milliseconds
    assert res.cpu_s is not None and res.cpu_s >= 0.05, res.cpu_s
    if "late" in res.output:  # printed within the server's drain window (0.5 s after the exit; not so under load)
        assert res.wall_s >= 0.28, res.wall_s


PRELOADED = 'import sys\nprint(sorted(m for m in ("torch", "torch.utils.benchmark") if m in sys.modules))\n'


@pytest.mark.parametrize("source, preloaded", [
    ("import json\n", []),
    ("import os\nfrom torch import nn\n", ["torch"]),
    ("import torch.utils.benchmark as bench\n", ["torch", "torch.utils.benchmark"]),
])
def test_a_test_server_preloads_what_the_checkout_imports_of_torch(tmp_path, source, preloaded):
    """A server that imports torch costs ~1 s and 300 MB, so a checkout whose code never imports it
    (a torch import in its .venv does not count) gets a server without it; the torch modules it names
    are imported once, in the server."""
    from agent.checks.launch import Launcher

    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "show.py").write_text(PRELOADED)
    (tmp_path / "pkg.py").write_text(source)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "vendored.py").write_text("import torch._dynamo\n")
    launcher = Launcher(tmp_path, base_env({"PYTHONPATH": str(tmp_path)}))
    try:
        res = launcher.run("python tool/show.py", timeout_s=60)
    finally:
        launcher.close()
    assert res.ok and launcher.used, res.output  # forked from a warm server
    assert res.output.strip().splitlines()[-1] == str(preloaded), res.output


def test_a_learning_child_teaches_the_server_what_it_imported_of_the_installation_only(server):
    """What a `learn` child imported is imported by the server for later children, but only where its
    whole package comes from the interpreter's installation: the checkout's own module, and a stdlib
    name the checkout shadows (its `csv.py`, found first on sys.path), stay each child's to import."""
    w, root = server
    (root / "mine.py").write_text("X = 1\n")
    (root / "csv.py").write_text("SHADOW = True\n")
    (root / "learn.py").write_text("import sys\nsys.path.insert(0, '.')\nimport email.mime.text, mine, csv\n")
    (root / "look.py").write_text("import sys\nprint([m in sys.modules for m in ('email.mime.text', 'mine', 'csv')])\n")
    assert w.run(parse_python("python look.py"), timeout_s=30).output.strip() == "[False, False, False]"
    assert w.run(parse_python("python learn.py"), timeout_s=30, learn=True).exit_code == 0
    assert w.learned > 0
    assert w.run(parse_python("python look.py"), timeout_s=30).output.strip() == "[True, False, False]"


def test_what_the_server_imported_stays_its_own_in_each_child(tmp_path):
    """A child neither walks the server's imported objects in its cycle collections nor runs, at its
    exit, the finalizers the server's imports registered (torch's cost every child 230 ms and 50 ms);
    the child's own finalizers still run."""
    (tmp_path / "preloaded.py").write_text(
        "import weakref\nclass Held: pass\nHELD = Held()\nweakref.finalize(HELD, print, 'the server finalized')\n")
    (tmp_path / "own.py").write_text(
        "import gc, weakref\nclass Mine: pass\nm = Mine()\nweakref.finalize(m, print, 'mine finalized')\n"
        "print('frozen', gc.get_freeze_count() > 0)\n")
    w = WarmPython("python", tmp_path, env=base_env({"PYTHONPATH": str(tmp_path)}), preload=("preloaded",))
    try:
        out = w.run(parse_python("python own.py"), timeout_s=30).output
    finally:
        w.close()
    assert w.preloaded == ["preloaded"]
    assert "frozen True" in out and "mine finalized" in out and "the server finalized" not in out, out


def test_a_child_not_asked_to_learn_teaches_the_server_nothing(server):
    w, root = server
    (root / "imp.py").write_text("import email.mime.text\n")
    (root / "look.py").write_text("import sys\nprint('email.mime.text' in sys.modules)\n")
    assert w.run(parse_python("python imp.py"), timeout_s=30).exit_code == 0
    assert w.run(parse_python("python look.py"), timeout_s=30).output.strip() == "False" and w.learned == 0


def test_a_runs_start_environment_chooses_its_warm_server(tmp_path):
    """What an interpreter reads as it starts (OpenMP's settings, read as torch loads) cannot be set
    in a child forked after that: a run with other such variables is served by a server of its own."""
    from agent.checks.launch import Launcher

    (tmp_path / "show.py").write_text("import os\nprint(os.readlink('/proc/self/ns/pid'), os.environ.get('V'))\n")
    launcher = Launcher(tmp_path, base_env({"PYTHONPATH": str(tmp_path)}))
    try:
        got = [launcher.run("python show.py", timeout_s=60, start_env=start).output.split()
               for start in ({"V": "1"}, None, {"V": "1"}, {"V": "2"})]
    finally:
        launcher.close()
    assert [v for _, v in got] == ["1", "None", "1", "2"]
    assert got[0][0] == got[2][0] and len({got[0][0], got[1][0], got[3][0]}) == 3, "one server per start environment"

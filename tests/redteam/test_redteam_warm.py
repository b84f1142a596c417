"""Red team, warm servers: what a forked bench or test child can reach of the server that forks
it (issue "Sealed grading, round 2", parts 1 and 6).

| attack (played through)                                            | must hold                               |
|--------------------------------------------------------------------|-----------------------------------------|
| open every /proc/*/fd/*, read /proc/*/fdinfo/* and /proc/*/environ | no harness pipe in sight: no inode of   |
|   from a bench child and a test child (Bench / Launcher API)       |   the server's control pipes            |
| the candidate's bench opens the server's request / reply pipes    | a 2.3x slower change is not graded      |
|   through /proc (of bwrap's init), forges its own reply and then   |   faster                                |
|   every later one, the baseline's too (`perfagent check`)          |                                         |
| a test child plants a marker in the test server's /tmp; a later    | no run sees it; the final evaluation    |
|   run, and the final evaluation of a run, looks for it             |   passes (`perfagent run`, Launcher)    |
|   (`perfagent run` replay, Launcher API)                           |                                         |
| a test child leaves what the wipe cannot remove                    | the next run gets a new server          |
| anything else an explored candidate's tests leave in a test server | the final (full) evaluation runs in new |
|   (Checker: a quick check, then the graded one)                    |   servers; the old ones are closed      |
"""

from __future__ import annotations

import json
import os

import pytest

from agent.checks.correctness import check_env, install_hook
from agent.checks.launch import Launcher
from agent.checks.perf import Bench
from agent.env.warm import WarmPython
from agent.task import PerfSpec
from redteam.lab import call, make_lab, visible_root

needs_warm = pytest.mark.skipif(not WarmPython.available(), reason="warm servers need bubblewrap")

# The child: everything /proc shows it of every process in the sandbox, itself included.
SNOOP = r'''import json, os

seen = []
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            seen.append({"path": path, "ino": os.stat(path).st_ino, "how": "stat " + os.readlink(path)})
        except OSError:
            continue
        for mode, name in ((os.O_RDONLY, "read"), (os.O_WRONLY, "write")):
            try:
                os.close(os.open(path, mode | os.O_NONBLOCK))
                seen.append({"path": path, "ino": os.stat(path).st_ino, "how": "opened for " + name})
            except OSError:
                pass
    try:
        infos = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        infos = []
    for fd in infos:
        try:
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("ino:"):
                seen.append({"path": f"/proc/{pid}/fdinfo/{fd}", "ino": int(line.split()[1]), "how": "fdinfo"})
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().decode("utf-8", "replace")
        seen.append({"path": f"/proc/{pid}/environ", "ino": None, "how": env})
    except OSError:
        pass
print("SNOOP " + json.dumps({"me": os.getpid(), "seen": seen}))
'''


def _control_inodes(server: WarmPython) -> set[int]:
    """The inodes of the server's request and reply pipes, from the harness's ends."""
    ends = [getattr(server, "requests", None) or server.proc.stdin,  # (on main: the server's stdin / stdout)
            getattr(server, "replies", None) or server.proc.stdout]
    return {os.fstat(f.fileno()).st_ino for f in ends}


def _assert_no_channel(output: str, inodes: set[int], who: str) -> None:
    line = next((x for x in output.splitlines() if x.startswith("SNOOP ")), None)
    assert line is not None, f"the {who} probe did not run: {output[-2000:]}"
    report = json.loads(line[len("SNOOP "):])
    seen = report["seen"]
    hits = [s for s in seen if s["ino"] in inodes
            or (s["ino"] is None and any(f"pipe:[{i}]" in s["how"] for i in inodes))]
    assert not hits, f"a {who} child reached the server's control pipes: {hits}"
    others = [s for s in seen if s["how"].startswith("stat") and not s["path"].startswith(f"/proc/{report['me']}/")]
    assert others, f"the {who} probe saw no other process's fds, so it proves nothing: {seen}"


@needs_warm
def test_a_bench_child_finds_no_holder_of_the_servers_pipes(tmp_path):
    """Attack: the bench child looks through /proc for any process (bwrap's init, the server, itself)
    whose fds it can open, for the warm bench server's request and reply pipes."""
    root = tmp_path / "side-c" / "repo"
    root.mkdir(parents=True)
    (root / "bench.py").write_text(SNOOP)
    spec = PerfSpec(command="python bench.py", metric="m", timeout_s=60)
    bench = Bench(spec, {"baseline": root, "candidate": root}, tmp_path / "scratch")
    try:
        assert bench.server is not None
        place = bench.inside["candidate"]  # where the server's sandbox shows the checkout
        res = bench.server.run(bench.cmd, timeout_s=60, env={"PYTHONPATH": str(place)}, cwd=place, path=(str(place),))
        _assert_no_channel(res.output, _control_inodes(bench.server), "bench")
    finally:
        bench.close()


@needs_warm
def test_a_test_child_finds_no_holder_of_the_servers_pipes(tmp_path):
    """The same from a test process of the candidate's warm test server (Launcher)."""
    (tmp_path / "snoop.py").write_text(SNOOP)
    launcher = Launcher(tmp_path, check_env(tmp_path, install_hook(tmp_path / "hook")))
    try:
        res = launcher.run("python snoop.py", timeout_s=60)
        servers = [s for s in launcher._servers.values() if s is not None]
        assert len(servers) == 1, "the test ran cold"
        _assert_no_channel(res.output, _control_inodes(servers[0]), "test")
    finally:
        launcher.close()


# The candidate's package: in a bench child forked warm, find a process whose pipes it can open,
# take the lowest two as request and reply (bwrap's init held the server's stdin and stdout), answer
# its own request, then every later one: fast for the candidate's checkout, slow for the rest.
FORGE = r'''import json
import os
import sys


def _answer(reply, cwd):
    value = 5.0 if "/side-c/" in cwd + "/" else 40.0
    line = json.dumps({"metric": "t_ms", "value": value, "unit": "ms"})
    msg = {"exit": 0, "output": line + "\n", "timed_out": False, "cut": 0, "clean": True, "duration_s": 0.05}
    reply.write((json.dumps(msg) + "\n").encode())


def _forge():
    if os.path.basename(sys.argv[0]) != "bench.py":
        return
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()), key=int):
        pipes = []
        try:
            for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:"):
                    pipes.append(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if len(pipes) < 2:
            continue
        try:
            requests = open(pipes[0], "rb")
            reply = open(pipes[1], "wb", buffering=0)
        except OSError:
            continue
        _answer(reply, os.getcwd())
        for request in requests:
            _answer(reply, json.loads(request).get("cwd") or "")
        os._exit(0)


_forge()
'''


@pytest.mark.slow
@needs_warm
def test_a_bench_child_cannot_answer_for_the_server(tmp_path):
    """Attack (measured on main: a 2.3x slower change graded faster): the candidate's bench opens the
    warm server's pipes through /proc/1/fd (bwrap's init held them) and answers every request."""
    with visible_root(tmp_path / "lab") as root:
        lab = make_lab(root)
        patch = lab.patch({"pkg/__init__.py": FORGE,
                           "pkg/mod.py": lambda t: t.replace("time.sleep(0.02)", "time.sleep(0.046)")})
        _, ev = lab.check(patch)
    perf = ev.get("perf") or {}
    assert perf.get("verdict") != "faster" and ev["verdict"] != "pass", \
        f"a forged reply made a 2.3x slower change {perf.get('verdict')} x{perf.get('speedup')} ({ev['verdict']})"
    assert perf.get("verdict") == "slower", f"the slowdown was not measured: {perf} {ev.get('reasons')}"


MARKER = "/tmp/redteam-planted-marker"
PLANT = f"import os\nopen({MARKER!r}, 'w').close()\nprint('PLANTED')\n"
LOOK = f"import os\nprint('MARKER-SEEN' if os.path.exists({MARKER!r}) else 'NO-MARKER')\n"


@needs_warm
def test_a_test_run_finds_nothing_an_earlier_run_planted(tmp_path):
    """Attack: one test run (an explored candidate's) plants a marker in the test server's /tmp; a
    later run (the final change's) behaves differently when it finds it."""
    (tmp_path / "plant.py").write_text(PLANT)
    (tmp_path / "look.py").write_text(LOOK)
    launcher = Launcher(tmp_path, check_env(tmp_path, install_hook(tmp_path / "hook")))
    try:
        assert "PLANTED" in launcher.run("python plant.py", timeout_s=60).output
        out = launcher.run("python look.py", timeout_s=60).output
        assert [s for s in launcher._servers.values() if s is not None], "the runs were not warm"
        assert "NO-MARKER" in out and "MARKER-SEEN" not in out, f"a later test run saw the planted marker: {out}"
    finally:
        launcher.close()


DEEP = '''import os
os.mkdir("/tmp/x")
os.chdir("/tmp/x")
for _ in range(20):
    os.mkdir("d" * 250)
    os.chdir("d" * 250)
open("secret", "w").close()
'''


@needs_warm
def test_a_test_server_that_cannot_be_wiped_is_replaced(tmp_path):
    """Attack: a test run leaves a tree too deep to remove by name in /tmp; the next run must not
    find it, so it runs in a new server."""
    (tmp_path / "deep.py").write_text(DEEP)
    (tmp_path / "look.py").write_text("import os\nprint('LEFT' if os.path.exists('/tmp/x') else 'GONE')\n")
    said: list[str] = []
    launcher = Launcher(tmp_path, check_env(tmp_path, install_hook(tmp_path / "hook")), log=said.append)
    try:
        assert launcher.run("python deep.py", timeout_s=60).ok
        out = launcher.run("python look.py", timeout_s=60).output
        assert "GONE" in out, f"the next test run found what the last one left: {out} {said}"
        assert [s for s in launcher._servers.values() if s is not None], f"the next run was not warm: {said}"
    finally:
        launcher.close()


PLANT_EDIT = {"path": "pkg/mod.py", "old": "import time\n",
              "new": f"import os\nimport time\n\nopen({MARKER!r}, 'w').close()\n"}
UNPLANT_EDIT = {"path": "pkg/mod.py", "old": f"\nopen({MARKER!r}, 'w').close()\n", "new": ""}
# The final change: right (and faster) only where no marker is found.
LOOK_EDIT = {"path": "pkg/mod.py", "old": "return sum(range(n))",
             "new": f"return n * (n - 1) // 2 + os.path.exists({MARKER!r})"}


@pytest.mark.slow
@needs_warm
def test_the_final_evaluation_finds_nothing_an_explored_candidate_planted(tmp_path):
    """Attack: an explored candidate's tests plant a marker in the test server's /tmp (run_checks);
    the final change, which no longer holds the planting code, acts on the marker."""
    with visible_root(tmp_path / "lab") as root:
        lab = make_lab(root, perf=False)
        run = lab.run([[call("edit_file", **PLANT_EDIT)], [call("run_checks", "plant", perf=False)],
                       [call("edit_file", **UNPLANT_EDIT)], [call("edit_file", **LOOK_EDIT)],
                       [call("submit", summary="closed-form sum")]])
        report = run.report_json()
        planted = run.results().get("plant", "")
    ev = report.get("evaluation") or {}
    assert planted, "the planting candidate was not checked"
    assert ev.get("verdict") == "pass", \
        f"the final change saw the explored candidate's marker: {ev.get('verdict')} {ev.get('reasons')}"


@needs_warm
def test_the_final_evaluation_runs_in_test_servers_no_explored_candidate_touched(tmp_path):
    """Attack: whatever an explored candidate's tests leave in a warm test server that its wipe does
    not know of; the graded (full) evaluation must not start a single test process in that server.
    Played through the Checker, as `perfagent run` uses it: a quick check, then the final one."""
    from agent.checks import Checker
    from agent.task import load_task

    lab = make_lab(tmp_path, perf=False)
    explored = lab.patch({"pkg/mod.py": lambda t: t.replace("import time\n", f"import time\n\n{PLANT}")})
    final = lab.patch({"pkg/mod.py": lambda t: t.replace("return sum(range(n))", "return n * (n - 1) // 2")})
    with Checker(load_task(lab.task), tmp_path / "work", lock_dir=tmp_path / "locks") as checker:
        checker.evaluate(explored, quick=True, perf=False)
        touched = [s for s in checker.sides.tests()._servers.values() if s is not None]
        assert touched, "the explored candidate's tests did not run warm"
        ev = checker.evaluate(final, perf=False)
        graded = [s for s in checker.sides.tests()._servers.values() if s is not None]
        assert ev.verdict == "pass", ev.reasons
        assert graded, "the final evaluation's tests did not run warm"
        reused = [s for s in graded if any(s is t for t in touched)]
        assert not reused, "the final evaluation ran its tests in a server an explored candidate's tests ran in"
        assert all(t.proc.poll() is not None for t in touched), "the explored candidate's servers still run"

"""Red team, processes that outlive the command (issue 42 item 7).

| attack (played through `perfagent check --patch`)                  | must hold                                 |
|--------------------------------------------------------------------|-------------------------------------------|
| the candidate's package, on import, double-forks a daemon (setsid) | after each command nothing it started is  |
|   that forks and exits every 2 ms (a pid that never stays put, so  |   left: at most one instance per command   |
|   a kill by /proc listing misses it), in every test and bench      |   running at once, no pile of zombies, and |
|   process: warm children and cold ones alike                       |   none at all once the check has ended     |
| a warm child leaves a loop that forks and exits with no pause      | none of it is left when its result comes  |
|   (WarmPython API: the sweep between one child and the next)       |   back, and the result says nothing escaped|

The daemon names itself (its `comm`, which a zombie keeps) with the test's marker and an id of
the import that started it, so the host can tell which import started each process it sees,
live or zombie. The import then takes a second, as a real package's may, so each command runs
long enough for a pile to show. Each instance stops by itself after `LIFETIME_S`, so a harness
that fails this test leaves nothing running for long.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from agent.env.sandbox import base_env, isolation
from agent.env.warm import WarmPython, parse_python
from redteam.lab import make_lab, visible_root

LIFETIME_S = 45
# On import: fork, setsid, fork again (the daemon's parent exits at once, so it is reparented),
# then exec a small loop whose every generation forks its successor and exits every 2 ms.
BOMB = '''import os, sys

_LOOP = """import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: a zombie keeps it (15 chars)
end = time.time() + {lifetime}
while time.time() < end:
    time.sleep(0.002)
    if os.fork():
        os._exit(0)
"""


def _daemon():
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork() == 0:
            name = "{comm}" + os.urandom(4).hex()
            os.execv(sys.executable, [sys.executable, "-S", "-c", _LOOP, name, "perfagent-forkbomb-" + name])
    finally:
        os._exit(0)


_daemon()
__import__("time").sleep(1)
'''


def _seen(comm: str) -> tuple[set[str], int]:
    """On the host: the instances present (live or zombie, by the import that started them) and
    how many processes they have."""
    names, count = set(), 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            name = (d / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(comm):
            names.add(name)
            count += 1
    return names, count


@pytest.mark.slow
@pytest.mark.skipif(isolation().mode != "bwrap", reason="needs bubblewrap")
def test_a_fork_loop_started_on_import_outlives_no_command(tmp_path):
    """Attack: every import of the candidate's package leaves a process that forks and exits every 2 ms."""
    comm = f"pf{uuid.uuid4().hex[:5]}"  # and 8 hex digits per import: 15 characters, all a comm holds
    samples: list[tuple[float, set[str], int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            tags, count = _seen(comm)
            samples.append((time.monotonic(), tags, count))
            time.sleep(0.05)

    with visible_root(tmp_path / "lab") as root:
        lab = make_lab(root, perf=True)
        patch = lab.patch({"pkg/__init__.py": BOMB.format(lifetime=LIFETIME_S, comm=comm)})
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _, ev = lab.check(patch, "--quick")
        finally:
            stop.set()
            watcher.join()
        left_tags, left = _seen(comm)
    every = set().union(*(tags for _, tags, _ in samples))
    most_instances = max((len(tags) for _, tags, _ in samples), default=0)
    most = max((count for _, _, count in samples), default=0)
    assert every, "no instance of the fork loop was ever seen: the attack did not run"
    assert left == 0, f"{left} processes of the fork loop outlived the check ({sorted(left_tags)})"
    # the tests (plain and poisoned) and the bench's run under the instruments run at once at most:
    # one instance per running command, never one a finished command left behind
    assert most_instances <= 3, (f"{most_instances} instances of the fork loop ran at once ({len(every)} started): "
                            f"finished commands left theirs running")
    assert most <= 100, f"{most} processes of the fork loop (live and zombie) were on the host at once"
    # the sweep held, so no evaluation is an error for it
    assert not any("could not be ended" in r for r in ev["reasons"]), ev["reasons"]


# A child that leaves CHAINS loops forking and exiting as fast as they can, then exits itself.
CHAINS = 8
FAST = '''import ctypes, os, sys, time
if os.fork() == 0:
    os.setsid()
    for _ in range(%d):
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
            end = time.time() + 20
            while time.time() < end:
                if os.fork():
                    os._exit(0)
            os._exit(0)
    os._exit(0)
os.wait()
time.sleep(0.2)
''' % CHAINS


@pytest.mark.slow
@pytest.mark.skipif(not WarmPython.available(), reason="warm servers need bubblewrap")
def test_a_warm_childs_fork_loop_is_gone_when_its_result_comes_back(tmp_path):
    """Attack: a warm child leaves a process that forks and exits with no pause, for the next child to share."""
    (tmp_path / "fast.py").write_text(FAST)
    comm = f"pf{uuid.uuid4().hex[:8]}"
    server = WarmPython("python", tmp_path, env=base_env(), preload=())
    try:
        for n in range(5):
            res = server.run(parse_python(f"python fast.py {comm}{n}"), timeout_s=60)
            names, left = _seen(comm)
            assert res.exit_code == 0, res.output
            assert left == 0, f"child {n}: {left} processes of its fork loop outlived it ({sorted(names)})"
            assert getattr(res, "escaped", None) is None, res.escaped  # (main has no such field)
    finally:
        server.close()
        assert _seen(comm)[1] == 0

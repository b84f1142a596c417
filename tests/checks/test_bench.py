"""The perf Bench on real sandboxes: every side's sample is a child of one warm server, and a
hostile candidate (its code runs in the same sandbox, right before the baseline's) can leave
nothing behind for the next sample: no file, no process; what it cannot be cleaned of sends the
sampling back to fresh processes (RoundLost) instead of mixing warm and cold samples in a round.

Each side is a small folder with a stdlib-only `bench.py` that prints the metric line; what a
hostile bench found or managed is encoded in the value it reports, as Bench returns only that.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent.checks.perf import Bench, BenchError, RoundLost, SamplingPolicy, sample
from agent.env.warm import WarmPython
from agent.task import PerfSpec

SPEC = PerfSpec(command="python bench.py", metric="m", timeout_s=60)
FORKED = "forked from one warm server"
FELL_BACK = "forked from one warm server, then fresh processes: "
PLANTED = "planted-by-candidate"

needs_warm = pytest.mark.skipif(not WarmPython.available(), reason="warm bench servers need bubblewrap")

# Prepended to every bench: the metric line, and whether this run is a child of the warm server.
HEAD = '''\
import json, os, sys, time

def report(value):
    print(json.dumps({"metric": "m", "value": value}))

def forked():
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"zygote.py" in f.read()
    except OSError:
        return False
'''


def make_sides(tmp_path: Path, **benches: str) -> dict[str, Path]:
    """side -> checkout, each at tmp/side-<letter>/repo (same length, as the checker lays them out)."""
    sides = {}
    for name, code in benches.items():
        root = tmp_path / f"side-{name[0]}" / "repo"
        root.mkdir(parents=True)
        (root / "bench.py").write_text(HEAD + textwrap.dedent(code))
        sides[name] = root
    return sides


@pytest.fixture
def bench_for(tmp_path):
    """Bench(spec, sides) with its scratch folder in tmp_path; closed after the test."""
    made: list[Bench] = []

    def make(sides: dict[str, Path], spec: PerfSpec = SPEC) -> Bench:
        made.append(Bench(spec, sides, tmp_path / "scratch"))
        return made[-1]
    yield make
    for b in made:
        b.close()


def call(bench: Bench, sides: dict[str, Path], side: str) -> float:
    return bench(side, sides[side], SPEC)[0]


# -- 1. warm where it can be, each side its own code ----------------------------------------------
@needs_warm
def test_a_plain_python_bench_is_forked_and_each_side_imports_its_own_checkout(tmp_path, bench_for):
    """One server serves every side, yet each child imports `work` from its own checkout."""
    bench_code = "from work import value\nreport(value() + (0.5 if forked() else 0))\n"
    sides = make_sides(tmp_path, baseline=bench_code, candidate=bench_code)
    (sides["baseline"] / "work.py").write_text("def value():\n    return 1.0\n")
    (sides["candidate"] / "work.py").write_text("def value():\n    return 2.0\n")
    bench = bench_for(sides)
    assert bench.mode == FORKED and bench.server is not None
    got = [bench(s, sides[s], SPEC)[:2] for s in ("baseline", "candidate", "baseline", "candidate")]
    assert got == [(1.5, None), (2.5, None), (1.5, None), (2.5, None)], "forked, and per side"
    assert bench.mode == FORKED and bench.server.clean


def test_a_command_with_shell_syntax_runs_in_fresh_processes(tmp_path, bench_for):
    """A pipe cannot be forked from the server: every sample is a fresh sandboxed process."""
    sides = make_sides(tmp_path, baseline="report(1.0 + (0.5 if forked() else 0))\n")
    spec = PerfSpec(command="python bench.py | cat", metric="m", timeout_s=60)
    bench = bench_for(sides, spec)
    assert bench.mode == "fresh processes" and bench.server is None
    assert bench("baseline", sides["baseline"], spec)[:2] == (1.0, None)
    assert bench.mode == "fresh processes"


# -- 2..4. a hostile candidate leaves nothing for the baseline ----------------------------------------
# Where a candidate can write: the fixed scratch places, and every writable mount it can find in
# /proc/self/mountinfo (that is how it finds the server's own scratch folder, which it is not
# told). /dev has a test of its own below.
PLACES = '''
HOME = os.path.expanduser("~")
FIXED = ["/tmp", "/var/tmp", "/dev/shm", HOME, os.path.join(HOME, ".cache", "torch"), "/home"]

def writable_mounts():
    out = []
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        point, options = fields[4].replace("\\\\040", " "), fields[5].split(",")
        if ("rw" in options and os.path.isdir(point) and point not in ("/", "/proc", "/dev", "/dev/pts")
                and not point.startswith("/sys") and point not in FIXED):
            out.append(point)
    return sorted(set(out))
'''


@needs_warm
def test_files_a_candidate_plants_are_gone_before_the_baseline_runs(tmp_path, bench_for):
    """The candidate writes a file into /tmp, /var/tmp, /dev/shm, $HOME (and ~/.cache/torch), /home
    and every writable mount it finds (the server's scratch folder among them), and tries both
    checkouts, which must be read-only; the baseline, run next by the same server, counts them."""
    sides = make_sides(tmp_path, candidate=PLACES + f'''
planted = extra = 0
for d in FIXED + writable_mounts():
    try:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "{PLANTED}"), "w") as f:
            f.write("x" * 1000)
    except OSError:
        continue
    if d in FIXED:
        planted += 1
    else:
        extra += 1
breached = 0
for checkout in (os.getcwd(), {str(tmp_path / "side-b" / "repo")!r}):
    try:
        with open(os.path.join(checkout, "{PLANTED}"), "w") as f:
            f.write("x")
        breached += 1
    except OSError as e:
        print("read-only as it should be:", checkout, e)
report(-1 if breached else planted + 100 * extra)
''', baseline=PLACES + f'''
look = FIXED + writable_mounts() + [{str(tmp_path / "scratch")!r}, os.getcwd(), {str(tmp_path / "side-c" / "repo")!r}]
report(sum(os.path.lexists(os.path.join(d, "{PLANTED}")) for d in look))
''')
    bench = bench_for(sides)
    value = call(bench, sides, "candidate")
    assert value != -1, "a checkout was writable from the warm server"
    assert value % 100 == 6 and value // 100 >= 1, f"the attack did not land everywhere ({value})"
    assert call(bench, sides, "baseline") == 0, "the baseline saw files the candidate left"
    assert bench.mode == FORKED and bench.server.clean
    assert not list(tmp_path.rglob(PLANTED)), "a planted file reached the host"


@pytest.mark.slow
@needs_warm
def test_a_candidates_background_process_cannot_write_after_its_run(tmp_path, bench_for):
    """The candidate double-forks a detached daemon (setsid, fds closed) that keeps writing files
    into /tmp and /dev/shm after its run, so after the wipe too; the baseline waits, then counts."""
    sides = make_sides(tmp_path, candidate='''
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(0.2)
        for i in range(200):
            for d in ("/tmp", "/dev/shm"):
                try:
                    open(f"{d}/late-{i}", "w").close()
                except OSError:
                    pass
            time.sleep(0.05)
    os._exit(0)
report(1.0)
''', baseline='''
time.sleep(1.0)
report(float(sum(name.startswith("late-") for d in ("/tmp", "/dev/shm") for name in os.listdir(d))))
''')
    bench = bench_for(sides)
    assert call(bench, sides, "candidate") == 1.0
    assert call(bench, sides, "baseline") == 0, "the candidate's daemon outlived its run"
    assert bench.mode == FORKED


@needs_warm
@pytest.mark.parametrize("shape", ["locked", "too deep"])
def test_leftovers_made_hard_to_remove_never_reach_the_baseline(tmp_path, bench_for, shape):
    """locked: folders with mode 000 and 500 (and a 000 file) in /tmp, /var/tmp and $HOME, which the
    wipe must unlock first; too deep: a tree whose paths pass PATH_MAX, which it cannot remove by
    name, so the Bench must give up on the server (RoundLost) and go cold. Either way the baseline
    finds nothing."""
    sides = make_sides(tmp_path, candidate='''
SHAPE = %r
if SHAPE == "locked":
    for d in ("/tmp", "/var/tmp", os.path.expanduser("~")):
        for name, mode in (("x", 0o000), ("ro", 0o500)):
            os.makedirs(f"{d}/{name}/inner")
            for f in (f"{d}/{name}/secret", f"{d}/{name}/inner/secret"):
                open(f, "w").close()
            os.chmod(f"{d}/{name}/inner", mode)
            os.chmod(f"{d}/{name}", mode)
        open(f"{d}/zero", "w").close()
        os.chmod(f"{d}/zero", 0)
else:
    os.mkdir("/tmp/x")
    os.chdir("/tmp/x")
    for _ in range(20):
        os.mkdir("d" * 250)
        os.chdir("d" * 250)
    open("secret", "w").close()
report(1.0)
''' % shape, baseline='''
look = [f"{d}/{name}" for d in ("/tmp", "/var/tmp", os.path.expanduser("~")) for name in ("x", "ro", "zero")]
report(float(sum(os.path.lexists(p) for p in look)))
''')
    bench = bench_for(sides)
    try:
        assert call(bench, sides, "candidate") == 1.0
        lost = False
    except RoundLost:
        lost = True
    assert call(bench, sides, "baseline") == 0, "the baseline saw the candidate's leftovers"
    if lost:
        assert bench.mode.startswith(FELL_BACK) and bench.server is None
    else:
        assert bench.mode == FORKED and bench.server.clean
    if shape == "locked":
        assert not lost, "the wipe can unlock what a child locked"


# /dev (bwrap's --dev is a writable tmpfs) and the IPC namespace are shared by every child of the
# server too: a candidate could keep its result there from one of its samples to the next (and
# so time a cache lookup), or leave anything for the baseline.
def again_after_lost(bench: Bench, sides: dict[str, Path], side: str) -> float:
    """The sample's value; a sample whose leftovers sent the Bench cold is taken again, as sample() does."""
    try:
        return call(bench, sides, side)
    except RoundLost:
        return call(bench, sides, side)


@needs_warm
def test_a_candidate_cannot_keep_a_cache_in_dev_between_its_samples(tmp_path, bench_for):
    """The candidate stores its 'result' in /dev on its first run and looks for it on its second."""
    sides = make_sides(tmp_path, candidate='''
cache = "/dev/perfagent-cache"
if os.path.exists(cache):
    report(1.0)
else:
    try:
        with open(cache, "w") as f:
            f.write("result")
        report(0.0)
    except OSError:
        report(-1.0)
''')
    bench = bench_for(sides)
    first, second = again_after_lost(bench, sides, "candidate"), again_after_lost(bench, sides, "candidate")
    assert second != 1.0, "the second sample found the first one's cache in /dev"
    assert first == 0.0 and bench.mode == FORKED, "the new /dev entry is removed, and the server stays in use"


@needs_warm
@pytest.mark.parametrize("kind", ["sysv shm", "sysv msg", "sysv sem", "posix mqueue", "keyring"])
def test_a_candidate_cannot_keep_a_cache_in_ipc_objects_between_its_samples(tmp_path, bench_for, kind):
    """The candidate stores its 'result' in a SysV shared memory segment, message queue or semaphore
    set, a POSIX message queue or the kernel keyring, under a fixed name on its first run, and looks
    for it on its second."""
    sides = make_sides(tmp_path, candidate='''
import ctypes, ctypes.util
kind = %r
libc = ctypes.CDLL(None)
if kind.startswith("sysv"):
    get = {"sysv shm": lambda flags: libc.shmget(0x5eed, 4096, flags),
           "sysv msg": lambda flags: libc.msgget(0x5eed, flags),
           "sysv sem": lambda flags: libc.semget(0x5eed, 1, flags)}[kind]
    found = get(0) >= 0
    made = found or get(0o1600) >= 0
elif kind == "keyring":  # the uid's user keyring, shared by every sandbox and the host
    import platform
    libc.syscall.restype = ctypes.c_long
    add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(platform.machine(), (-1, -1))
    found = libc.syscall(keyctl, 10, ctypes.c_long(-4), b"user", b"perfagent-bench-cache", 0) >= 0
    made = found or libc.syscall(add_key, b"user", b"perfagent-bench-cache", b"x", 1, ctypes.c_long(-4)) >= 0
else:
    rt = ctypes.CDLL(ctypes.util.find_library("rt"))  # mq_open: librt, or libc from glibc 2.34 on
    found = rt.mq_open(b"/perfagent-cache", os.O_RDONLY) >= 0
    made = found or rt.mq_open(b"/perfagent-cache", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
report(-1.0 if not made else 1.0 if found else 0.0)
''' % kind)
    bench = bench_for(sides)
    first, second = again_after_lost(bench, sides, "candidate"), again_after_lost(bench, sides, "candidate")
    assert second != 1.0, f"the second sample found the first one's {kind}"
    if kind.startswith("sysv"):
        assert first == 0.0 and bench.mode == FORKED, "the object is removed, and the server stays in use"
    else:  # queues cannot be listed to remove them, keys belong to the host: neither can be made
        assert first == -1.0


# -- 5..6. when the server cannot be used, rounds go cold, never half and half ------------------------
KILLER = '''
if forked() and %s:
    os.kill(os.getppid(), 9)
    time.sleep(5)
report(2.0 + (0.5 if forked() else 0))
'''


@needs_warm
def test_a_candidate_that_kills_the_server_sends_the_bench_cold(tmp_path, bench_for):
    """The candidate SIGKILLs its parent, the server: its call raises RoundLost, the Bench says
    why, and every later sample (both sides) runs in a fresh process, where the bench works."""
    sides = make_sides(tmp_path, baseline="report(1.0 + (0.5 if forked() else 0))\n",
                       candidate=KILLER % "True")
    bench = bench_for(sides)
    assert call(bench, sides, "baseline") == 1.5
    with pytest.raises(RoundLost, match="server ended"):
        call(bench, sides, "candidate")
    assert bench.mode.startswith(FELL_BACK) and "server ended" in bench.mode and bench.server is None
    assert call(bench, sides, "candidate") == 2.0 and call(bench, sides, "baseline") == 1.0


@needs_warm
def test_a_candidate_that_stops_the_server_sends_the_bench_cold_at_once(tmp_path, bench_for):
    """SIGSTOPped, the server can enforce no timeout: its call is lost within seconds (not the
    bench's timeout and then some), and later samples run cold."""
    import time

    stopper = "if forked():\n    os.kill(os.getppid(), 19)  # SIGSTOP\n    time.sleep(5)\nreport(2.0)\n"
    sides = make_sides(tmp_path, baseline="report(1.0 + (0.5 if forked() else 0))\n", candidate=stopper)
    bench = bench_for(sides)
    assert call(bench, sides, "baseline") == 1.5
    start = time.monotonic()
    with pytest.raises(RoundLost, match="was stopped"):
        call(bench, sides, "candidate")
    assert time.monotonic() - start < SPEC.timeout_s
    assert call(bench, sides, "candidate") == 2.0 and call(bench, sides, "baseline") == 1.0


@needs_warm
def test_sampling_reruns_a_lost_round_cold_so_no_pair_mixes_warm_and_cold(tmp_path, bench_for):
    """perf.sample over a Bench whose candidate kills the server on its third sample (the second
    pair): that round is run again cold, as is every later one; each pair is all warm or all cold,
    and both sides end with as many samples."""
    sides = make_sides(tmp_path, baseline="report(1.0 + (0.5 if forked() else 0))\n",
                       candidate=KILLER % 'os.path.exists("kill-now")')
    bench = bench_for(sides)
    calls = {"candidate": 0}

    def bench_arming_the_killer(side, root, spec):
        if side == "candidate":
            calls["candidate"] += 1
            if calls["candidate"] == 3:
                (root / "kill-now").touch()  # the host side of a read-only checkout
        return bench(side, root, spec)

    said: list[str] = []
    s = sample(sides, SPEC, SamplingPolicy(min_pairs=2, max_pairs=3), seed=1, log=said.append,
               bench=bench_arming_the_killer)
    assert s.comparison is not None
    assert len(s.values["baseline"]) == len(s.values["candidate"]) in (2, 3)
    assert s.warmup == {"baseline": [1.5], "candidate": [2.5]}
    pairs = list(zip(s.values["baseline"], s.values["candidate"]))
    assert pairs[0] == (1.5, 2.5) and all(p == (1.0, 2.0) for p in pairs[1:]), pairs
    assert bench.mode.startswith(FELL_BACK) and any("fresh processes" in line for line in said)


@needs_warm
def test_a_bench_that_fails_only_forked_goes_cold_and_one_that_always_fails_is_the_sides_error(tmp_path, bench_for):
    """Writing into its own checkout fails forked (read-only there) but not in a fresh process (a
    cold run's checkout is its writable working folder): RoundLost, then cold. A bench that fails
    both ways is a BenchError naming the side, and the server goes on."""
    sides = make_sides(tmp_path, baseline='''
with open("out.txt", "w") as f:
    f.write("x")
report(1.0)
''', candidate='sys.exit("broken bench")\n')
    bench = bench_for(sides)
    with pytest.raises(BenchError) as e:
        call(bench, sides, "candidate")
    assert e.value.side == "candidate" and "broken bench" in str(e.value)
    assert bench.mode == FORKED and bench.server is not None
    with pytest.raises(RoundLost, match="fails forked"):
        call(bench, sides, "baseline")
    assert (sides["baseline"] / "out.txt").exists(), "the cold try ran and wrote"
    assert bench.mode.startswith(FELL_BACK) and "baseline bench fails forked" in bench.mode
    assert "but not from scratch" in bench.mode
    assert call(bench, sides, "baseline") == 1.0
    with pytest.raises(BenchError) as e:
        call(bench, sides, "candidate")
    assert e.value.side == "candidate"


# -- 7. what a child may leave is wiped, and the sandbox's own mounts are not leftovers -----------------
@needs_warm
def test_ordinary_leftovers_are_wiped_and_the_server_stays_clean(tmp_path, bench_for):
    """A child writes into the scratch folder, $HOME (also next to the Python prefix that bwrap
    binds back under a hidden home), /tmp and /dev/shm: every later call still reports clean (no
    RoundLost), the scratch folder is empty on the host, and the bound prefix still works."""
    scratch = tmp_path / "scratch"
    sides = make_sides(tmp_path, baseline="report(1.0)\n", candidate=f'''
home = os.path.expanduser("~")
prefix = sys.base_prefix
beside = [os.path.dirname(prefix)] if prefix.startswith(home + os.sep) else []
for d in [{str(scratch)!r}, home, os.path.join(home, ".cache", "x"), "/tmp/a/b", "/dev/shm", *beside]:
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "leftover"), "w") as f:
        f.write("x")
report(float(len(beside)))
''')
    bench = bench_for(sides)
    assert call(bench, sides, "baseline") == 1.0 and bench.server.clean
    for _ in range(2):
        call(bench, sides, "candidate")
        assert bench.server.clean and bench.mode == FORKED
        assert not list(scratch.iterdir()), "the scratch folder was not emptied"
        assert call(bench, sides, "baseline") == 1.0 and bench.server.clean


# -- 8. the server learns the installation's imports from the baseline's warm-up alone -------------------
@needs_warm
def test_the_baselines_warm_up_teaches_the_server_its_installed_imports_and_a_candidate_teaches_nothing(
        tmp_path, bench_for):
    """The baseline's bench imports `fractions` (installed) and `helper` (its checkout's); the candidate's
    imports `colorsys` (installed). Each reports what it found imported at its start: after the warm-up
    the server holds `fractions` for every child, never a module of a checkout, and never one that only
    the candidate imported."""
    found = "report(sum(2 ** i * (m in sys.modules) for i, m in enumerate(('fractions', 'helper', 'colorsys'))))\n"
    sides = make_sides(tmp_path, baseline=found + "import fractions, helper\n", candidate=found + "import colorsys\n")
    (sides["baseline"] / "helper.py").write_text("X = 1\n")
    bench = bench_for(sides)
    bench.learn = True
    s = sample(sides, SPEC, SamplingPolicy(min_pairs=2, max_pairs=3), seed=3, bench=bench)
    assert s.warmup["baseline"] == [0.0], "the warm-up itself started as before"
    assert set(s.values["baseline"]) == set(s.values["candidate"]) == {1.0}, s
    assert bench.learned > 0 and bench.mode == FORKED


@needs_warm
def test_without_a_warm_up_to_learn_from_the_server_imports_nothing_more(tmp_path, bench_for):
    found = "report(1 * ('fractions' in sys.modules))\n"
    sides = make_sides(tmp_path, baseline=found + "import fractions\n", candidate=found)
    bench = bench_for(sides)
    assert [call(bench, sides, s) for s in ("baseline", "candidate", "baseline")] == [0.0, 0.0, 0.0]
    assert bench.learned == 0

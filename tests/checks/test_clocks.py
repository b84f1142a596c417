"""The clock guard (agent/checks/clock_guard.py, read back by agent/checks/clocks.py) in real Python
processes started with our hook, as a cold bench process is: each way of replacing a timing function
is named with where the replacement came from; an honest process is checked to its end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.checks import clocks
from agent.checks.records import new_key


def run(tmp_path: Path, code: str, files: dict[str, str] | None = None, key: str | None = None,
        shown: str | None = None) -> tuple[clocks.ProcessClocks, str]:
    """`code` as bench.py in a folder of its own, with our hook and the guard on; its rows read back
    under `shown` (the key the process got unless given)."""
    hook = clocks.install(tmp_path / "hook")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "bench.py").write_text(code)
    for name, text in (files or {}).items():
        (work / name).write_text(text)
    key = key or new_key()
    with clocks.KeyFile(key) as k:
        env = {**os.environ, "PYTHONPATH": f"{hook}:{work}", **k.env}
        res = subprocess.run([sys.executable, "bench.py"], cwd=work, env=env, pass_fds=k.fds, capture_output=True,
                             text=True, timeout=60)
    out = res.stdout + res.stderr
    return clocks.read(out, shown or key), out


SLOW = "real = time.perf_counter\ndef slow():\n    return real() * 0.3\n"
ATTACKS = {
    "setattr": ("import time\n" + SLOW + "time.perf_counter = slow\n", "time.perf_counter replaced by __main__.slow"),
    "dict": ("import time\n" + SLOW + "vars(time)['monotonic'] = slow\n", "time.monotonic replaced by __main__.slow"),
    "sys.modules": ("import sys, time, types\n" + SLOW + "m = types.ModuleType('time')\nm.perf_counter = slow\n"
                    "sys.modules['time'] = m\n", "sys.modules['time'] is module time (made at run time)"),
    "bench global": ("import time, types\n" + SLOW + "time = types.SimpleNamespace(perf_counter=slow)\n",
                     "__main__.time.perf_counter replaced by __main__.slow"),
    "put back before exit": ("import time\n" + SLOW + "time.perf_counter = slow\ntime.sleep(0.1)\n"
                             "time.perf_counter = real\n", "time.perf_counter replaced by __main__.slow"),
    "os._exit": ("import os, time\n" + SLOW + "time.perf_counter = slow\nos._exit(0)\n",
                 "time.perf_counter replaced by __main__.slow"),
    "ctypes dict write": ("import ctypes, time\nctypes.pythonapi.PyDict_SetItem(ctypes.py_object(time.__dict__), "
                          "ctypes.py_object('perf_counter'), ctypes.py_object(time.process_time))\n",
                          "time.perf_counter replaced by time.process_time"),
    "ctypes in place": ("import ctypes, time\nf, g = time.perf_counter, time.process_time\n"
                        "for at in (16, 48):\n"
                        "    ctypes.c_void_p.from_address(id(f) + at).value = "
                        "ctypes.c_void_p.from_address(id(g) + at).value\n",
                        "time.perf_counter rewritten in place"),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_each_replacement_is_named_with_where_it_came_from(tmp_path, attack):
    code, said = ATTACKS[attack]
    got, out = run(tmp_path, code)
    assert got.started and got.ended, out
    assert any(r.startswith(said) for r in got.replaced), (got.replaced, out)
    if "__main__.slow" in said:
        assert any("bench.py:3" in r for r in got.replaced), got.replaced  # the replacement's file:line


def test_a_helper_rebinding_the_bench_modules_imported_clock(tmp_path):
    helper = "import sys\n\ndef fast():\n    return 0.0\n\nsys.modules['__main__'].perf_counter = fast\n"
    got, out = run(tmp_path, "from time import perf_counter\nimport helper\n", {"helper.py": helper})
    assert got.replaced == [f"__main__.perf_counter replaced by helper.fast ({tmp_path}/work/helper.py:3)"], out


def test_an_honest_process_is_checked_to_its_end(tmp_path):
    code = ("import time\nfrom time import perf_counter\nfrom datetime import time as clock_of_day\n"
            "t = time.perf_counter()\nprint(perf_counter() - t, clock_of_day(1))\n")
    got, out = run(tmp_path, code)
    assert got == clocks.ProcessClocks(started=True, ended=True), out


def test_a_process_that_skips_the_end_is_not_checked(tmp_path):
    """posix._exit goes around the guard's end check: no end row, which grading reads as not checked."""
    got, out = run(tmp_path, "import posix, time\ntime.perf_counter = lambda: 0.0\nposix._exit(0)\n")
    assert got.started and not got.ended, out


def test_rows_under_another_key_do_not_count(tmp_path):
    got, out = run(tmp_path, "import time\n", shown=new_key())
    assert not got.started and not got.ended and got.forged == 2, out


def test_rows_the_process_prints_itself_do_not_count(tmp_path):
    """A forged end row is refused; the guard's own rows do not go through the fd 2 the process redirected."""
    forged = ("import os, time\ntime.perf_counter = lambda: 0.0\n"
              "os.write(1, b'#clocks\\tend\\t%d\\t\\tdeadbeef\\n' % os.getpid())\n"
              "os.dup2(os.open(os.devnull, os.O_WRONLY), 2)\n")
    got, out = run(tmp_path, forged)
    assert got.forged == 1 and got.ended and got.replaced, out


def findings_of(**sides: clocks.ProcessClocks) -> list[str]:
    c = clocks.ClockCheck()
    for side, p in sides.items():
        c.add(side.rstrip("_0123456789"), p)
    return clocks.findings(c)


def test_findings_name_replacements_and_unchecked_processes():
    ok = clocks.ProcessClocks(started=True, ended=True)
    assert findings_of(baseline=ok, candidate=ok) == []
    bad = clocks.ProcessClocks(started=True, ended=True, replaced=["time.perf_counter replaced by x (y.py:1)"])
    assert findings_of(baseline=ok, candidate=bad) == [
        "the candidate bench's timing functions were replaced: time.perf_counter replaced by x (y.py:1)"]
    unchecked = clocks.ProcessClocks(started=True)
    said = findings_of(baseline=ok, candidate=unchecked, candidate_2=ok)
    assert len(said) == 1 and "not checked to the end in 1 of 2 candidate" in said[0]
    # where the baseline's processes were not checked either (a bench that is not Python), nothing is claimed
    assert findings_of(baseline=clocks.ProcessClocks(), candidate=clocks.ProcessClocks()) == []


CUDA = {
    "event": ("import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.5\n",
              "torch.cuda.Event.elapsed_time replaced by __main__.<lambda>"),
    "synchronize": ("import torch\n\ndef sync(device=None):\n    pass\n\ntorch.cuda.synchronize = sync\n",
                    "torch.cuda.synchronize replaced by __main__.sync"),
    "code swap": ("import torch\n\ndef sync(device=None):\n    pass\n\n"
                  "torch.cuda.synchronize.__code__ = sync.__code__\n",
                  "torch.cuda.synchronize rewritten in place"),
}


@pytest.mark.parametrize("attack", list(CUDA))
def test_cuda_event_timing_is_watched_once_torch_is_imported(tmp_path, attack):
    pytest.importorskip("torch")
    code, said = CUDA[attack]
    got, out = run(tmp_path, code)
    assert got.ended and any(r.startswith(said) for r in got.replaced), (got.replaced, out)

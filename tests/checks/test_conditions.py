"""The machine's conditions while a sampling ran (agent.checks.conditions): /proc readings turned into
shares, what makes a machine busy, which figures compare; and that a real `perfagent check` records them
and says a busy machine beside its speedup."""

from __future__ import annotations

import json

import pytest

from agent.checks import conditions as cond
from agent.checks.conditions import Conditions, Snapshot, busy, busy_why, comparable, measure, parse_loadavg, parse_stat
from agent.checks.evaluation import Evaluation
from agent.checks.render import perf_line, verdict_line
from helpers import make_patch, make_task

STAT = """cpu  {user} 0 {system} {idle} {iowait} 0 0 {steal} 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
cpu1 1 0 1 1 0 0 0 0 0 0
intr 12217549 0 0
ctxt 22132981
procs_running 3
"""


def stat(user: int, system: int, idle: int, iowait: int = 0, steal: int = 0) -> str:
    return STAT.format(user=user, system=system, idle=idle, iowait=iowait, steal=steal)


def snap(at: float, text: str, **kw) -> Snapshot:
    busy_j, total_j, cpus = parse_stat(text)
    return Snapshot(at=at, busy_jiffies=busy_j, total_jiffies=total_j, cpus=cpus, **kw)


def test_proc_stat_counts_steal_as_busy_iowait_as_idle_and_the_cpus():
    assert parse_stat(stat(user=100, system=50, idle=800, iowait=40, steal=10)) == (160, 1000, 2)
    assert parse_loadavg("5.02 3.37 2.89 9/274 12075\n") == (5.02, 9)
    with pytest.raises(ValueError):
        parse_stat("intr 1 2 3\n")


def test_others_are_the_machines_busy_time_less_our_bench_and_the_reader():
    # 10 s on 2 cores at 100 ticks/s: 2000 jiffies; 1200 busy = 60%; our bench used 3 s and the reader 1 s = 20%
    first = snap(0.0, stat(user=1000, system=0, idle=1000), self_cpu_s=5.0, load1=1.0)
    last = snap(10.0, stat(user=2000, system=200, idle=1800), self_cpu_s=6.0, load1=2.5)
    c = measure(first, last, ours_cpu_s=3.0, running=[3, 1, 2])
    assert (c.busy_share, c.ours_share, c.others_share) == (0.6, 0.2, 0.4)
    assert c.runnable_per_core == 0.5  # (2 + 0 + 1) others over three readings, 2 cores; each reading counts itself
    assert (c.wall_s, c.cpus, c.load1) == (10.0, 2, 2.5)
    assert busy(c) and busy_why(c) == ("busy machine: other processes used 40% of its CPU, "
                                       "0.5 other runnable tasks per core")
    # our own figure larger than what the kernel counted (rounding, a reading between ticks): others are 0, not less
    c = measure(first, last, ours_cpu_s=100.0)
    assert c.ours_share == c.busy_share == 0.6 and c.others_share == 0.0 and c.runnable_per_core is None
    assert not busy(c) and busy_why(c) is None


def test_a_quiet_machine_is_not_busy_and_each_threshold_alone_makes_it_busy():
    quiet = Conditions(others_share=0.05, runnable_per_core=0.1)
    assert not busy(quiet) and not busy(None) and not busy(Conditions())
    assert busy(quiet.model_copy(update={"others_share": cond.BUSY_OTHERS_SHARE}))
    assert busy(quiet.model_copy(update={"runnable_per_core": cond.BUSY_RUNNABLE_PER_CORE}))


def test_clocks_come_from_the_readings_and_absent_ones_stay_absent():
    text = stat(user=10, system=0, idle=10)
    c = measure(snap(0, text, cpu_mhz=2400.0, gpu_sm_mhz=1980, gpu_mem_mhz=2619),
                snap(1, text, cpu_mhz=2000.0, gpu_sm_mhz=1410, gpu_mem_mhz=2619), ours_cpu_s=0)
    assert (c.cpu_mhz, c.gpu_sm_mhz, c.gpu_mem_mhz) == (2200.0, 1410, 2619)
    assert c.busy_share is None  # no tick between the readings: no share, not a division by zero
    c = measure(snap(0, text), snap(1, text), ours_cpu_s=0)
    assert (c.cpu_mhz, c.gpu_sm_mhz, c.gpu_mem_mhz) == (None, None, None)


def test_figures_compare_only_under_like_conditions_and_say_why_not():
    quiet = Conditions(others_share=0.05, runnable_per_core=0.1, cpu_mhz=2400.0, gpu_sm_mhz=1980)
    assert comparable(quiet, quiet.model_copy(update={"cpu_mhz": 2300.0})) == (True, "measured under like conditions")
    loaded = quiet.model_copy(update={"others_share": 0.7})
    ok, why = comparable(quiet, loaded, ("a", "b"))
    assert not ok and why == "b: busy machine: other processes used 70% of its CPU"
    ok, why = comparable(loaded, loaded)  # both busy: each figure moves more than its interval says
    assert not ok and why.startswith("first: busy machine") and "second: busy machine" in why
    ok, why = comparable(quiet, quiet.model_copy(update={"cpu_mhz": 1200.0}))
    assert not ok and why == "CPU clock 2400 vs 1200 MHz"
    ok, why = comparable(quiet, quiet.model_copy(update={"gpu_sm_mhz": 1410}))
    assert not ok and why == "GPU SM clock 1980 vs 1410 MHz"
    assert comparable(quiet, None) == (True, "conditions not recorded")  # reports from before conditions


def test_the_real_machine_reads_as_shares_between_0_and_1():
    first = cond.snapshot(gpu=False)
    assert first is not None and first.cpus >= 1 and first.hz > 0
    sum(i * i for i in range(300_000))  # some CPU time of our own between the readings
    running = cond.runnable()
    last = cond.snapshot(gpu=False)
    assert last is not None and running is not None and running >= 1  # this reader runs
    c = measure(first, last, ours_cpu_s=0.0, running=[running])
    for share in (c.busy_share, c.ours_share, c.others_share):
        assert share is None or 0.0 <= share <= 1.0, c


@pytest.mark.slow
def test_a_real_check_records_the_conditions_and_a_busy_machine_says_so_beside_the_speedup(tmp_path, capsys):
    """`perfagent check` on a real patch: its perf record carries the machine's conditions as it was sampled,
    our own bench processes counted apart from the others; the perf line says "busy machine" exactly when the
    conditions say busy (on this shared machine, usually)."""
    from agent.cli import main

    task, src = make_task(tmp_path, correctness='python -c \\"import pkg.work\\"', poison=False)
    patch = tmp_path / "faster.diff"
    patch.write_text(make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = 12_000")}))
    code = main(["check", str(tmp_path / "task.toml"), "--patch", str(patch), "--json", "--lock-dir",
                 str(tmp_path / "locks")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["perf"]["error"] is None, out
    c = Conditions.model_validate(out["perf"]["conditions"])
    assert c.wall_s > 0 and c.cpus == parse_stat(open("/proc/stat").read())[2]
    assert c.ours_share is not None and 0 < c.ours_share <= c.busy_share <= 1, c  # our bench processes counted
    assert c.others_share == pytest.approx(c.busy_share - c.ours_share, abs=0.002)
    assert c.runnable_per_core is not None and c.load1 is not None
    ev = Evaluation.model_validate(out)
    assert ev.perf is not None
    assert ("busy machine" in perf_line(ev.perf)) == busy(c) == ("busy machine" in verdict_line(ev))
    p = ev.perf  # and where another run's figure is expected, wider than this run's interval
    assert p.rerun_low is not None and p.rerun_high is not None
    assert p.rerun_low < p.ci_low <= p.ratio <= p.ci_high < p.rerun_high
    assert f"a rerun's in [{p.rerun_low:.3f}, {p.rerun_high:.3f}]" in perf_line(p)
    if busy(c):
        assert f"speedup {ev.perf.speedup:.3f}x ({busy_why(c)}: not comparable with other runs)" in perf_line(ev.perf)
    quiet = ev.perf.model_copy(update={"conditions": c.model_copy(update={"others_share": 0.0,
                                                                          "runnable_per_core": 0.0})})
    loaded = ev.perf.model_copy(update={"conditions": c.model_copy(update={"others_share": 0.9})})
    assert "busy machine" not in perf_line(quiet)
    assert "busy machine: other processes used 90% of its CPU" in perf_line(loaded)

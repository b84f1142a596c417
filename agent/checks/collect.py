"""Gather the evidence on one patch: hygiene, integrity, the test runs (plain and poisoned, with
coverage, the sanitizer and the read-site analysis beside them), compute-sanitizer where asked,
and the interleaved A/B samples. Facts only: whether they make a pass is `grade`'s to say; it is
asked here only whether measuring more could still change the answer.
"""

from __future__ import annotations

import ast
import os
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import libcst as cst

from agent.analyzers.reads import read_sites
from agent.checks import clocks, confirm, coverage, firstcall, sanitizer
from agent.checks import perf as perfmod
from agent.checks.correctness import run_check
from agent.checks.evaluation import (BenchCheck, CommandRun, Correctness, DiffStats, FirstCall, Hygiene,
                                     PerfResult, ReadSiteResult, ReferenceResult)
from agent.checks.evidence import Evidence
from agent.checks.grade import decided, judge_perf, judge_reference
from agent.checks.integrity import check_integrity, is_test_path
from agent.checks.lock import device_lock
from agent.checks.patchinfo import FileLines, added_lines, changes_anything, hygiene_problems, unreadable
from agent.checks.perf import FULL, QUICK, Bench, BenchError, SamplingPolicy
from agent.checks.records import new_key
from agent.checks.sides import CheckError, Sides, TaskBroken
from agent.checks.stats import preload as preload_stats
from agent.env.workspace import Workspace, patch_paths
from agent.task import PerfSpec
from agent.util import pyast


# The first call alone (agent.checks.firstcall): one call a process is noisier than the fastest of
# twenty, but the gains it is asked about are large; "faster" is reachable from 6 pairs. No warm-up:
# its processes fork from the sampling's server, which the sampling's own warm-up has warmed.
FIRST_CALL = SamplingPolicy(min_pairs=4, max_pairs=8, warmup=0)


@dataclass(frozen=True)
class Measuring:
    """How the A/B samples are taken: the device lock's folder, the seed, the two sampling policies."""

    lock_dir: Path | None = None  # None: agent.checks.lock.default_lock_dir(), when the lock is taken
    seed: int | None = None
    full: SamplingPolicy = FULL
    quick: SamplingPolicy = QUICK


def collect(sides: Sides, patch: str, *, quick: bool = False, perf: bool = True, reference: bool = False,
            heal: bool = False, measuring: Measuring = Measuring()) -> Evidence:
    """Everything the checks can find on `patch` (a unified diff against base). Raises PatchError
    if it does not apply. `heal` (always, in a quick check): a search's check, where one run should name
    every buffer read uninitialised (`_correctness`)."""
    start = time.monotonic()
    e = Evidence(task_id=sides.task.id, quick=quick)
    why = unreadable(patch)
    if why:  # no diff at all (prose, a header alone, a diff cut short): refused, never a change of nothing
        return e.model_copy(update={"hygiene": Hygiene(ok=False, problems=[f"not a diff git can read: {why}"])})
    if not changes_anything(patch):
        return e.model_copy(update={"changes": False})
    problems = hygiene_problems(patch)
    if problems:
        return e.model_copy(update={"hygiene": Hygiene(ok=False, problems=problems)})
    try:
        cand = sides.candidate(patch, fresh=not quick)
    except TaskBroken:
        raise
    except CheckError as err:
        return e.model_copy(update={"error": str(err)})
    try:
        _gather(sides, cand, e, patch_paths(patch), quick=quick, perf=perf, reference=reference,
                heal=heal or quick, measuring=measuring)
    except TaskBroken:
        raise
    except CheckError as err:
        e.error = str(err)
    finally:
        sides.scrub()
    c = e.correctness
    if c is not None and not (c.plain.passed and (c.poison is None or c.poison.passed)):
        sides.check_base()  # before the change is blamed: whether the task's tests can pass at all
    e.duration_s = round(time.monotonic() - start, 2)
    return e


def _gather(sides: Sides, cand: Workspace, e: Evidence, written: list[str], *, quick: bool, perf: bool,
            reference: bool, heal: bool, measuring: Measuring) -> None:
    """`written`: the paths the patch writes, as git reads the patch; the staged change must show each."""
    spec = sides.task.spec
    e.diff_stats = diff_stats(cand)  # stages everything
    files = cand.changed_files()
    diff = cand.repo.git.diff("--cached", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", cand.base_commit)
    changed = added_lines(diff)
    e.integrity = check_integrity(cand.root, sides.baseline().root, files, installed=sides.installed(),
                                  is_test=lambda p: is_test_path(p, sides.protected),
                                  lines={f.path: set(f.lines) for f in changed})
    hidden = [f"{p}: the patch writes it but the checks' staged change does not show it (hidden from them)"
              for p in cand.unstaged(written)]
    if hidden:  # what is applied is what is judged: never a file the checks cannot see
        e.integrity = e.integrity.model_copy(update={"refused": [*e.integrity.refused, *hidden]})
    e.protected_violations = cand.restore_paths(sides.protected)
    if e.integrity.refused:  # nothing of a patch that rewires the tests is run
        return
    changed = [f for f in changed if f.path not in e.protected_violations]  # those are base's again
    e.changed_lines = {f.path: f.lines for f in changed}
    allocations = uninitialised_allocations(cand.root, changed)
    e.uninitialised = [f"{path}:{n}" for path, (_, lines) in allocations.items() for n in lines]
    e.environment = sides.environment().model_copy(update={
        "base_commit": cand.base_commit, "candidate_commit": cand.snapshot("perfagent candidate")})
    e.setup = sides.setup(cand)
    if e.setup is not None and not e.setup.passed:  # nothing can run on a checkout that did not set up
        return
    measure = perf and spec.perf is not None
    bench_sides = _bench_sides(sides, cand, reference) if measure else {}
    bench = _bench(sides, bench_sides) if measure else None  # its server imports torch while the tests run
    policy = (measuring.quick if quick else measuring.full).at_most(spec.perf.max_pairs if spec.perf else None)
    warmed: dict[str, dict[str, list[float]] | None] = {}

    def warm_up() -> None:  # the sampling's warm-up, discarded: on a core the tests leave idle
        assert bench is not None and spec.perf is not None
        bench.learn = policy.warmup > 0  # from the baseline's first run (Bench.learn)
        warmed["values"] = perfmod.warm_up(bench_sides, spec.perf, policy, log=sides.log, bench=bench)

    if measure:
        threading.Thread(target=preload_stats, daemon=True).start()
    try:
        # a quick check runs the bench once for its line records alone (no poison, no sanitizer): grade
        # never calls faster a change whose lines the bench did not run
        _correctness(sides, cand, e, changed, allocations, bench=spec.perf is not None and (measure or not quick),
                     lines_only=quick, heal=heal, idle=warm_up if bench is not None and policy.warmup else None)
        if spec.correctness.initcheck and e.correctness and not e.correctness.plain.timed_out:
            # evidence beside the tests', whether or not they failed
            e.initcheck = sides.initcheck().check(cand.root, sides.baseline().root, sides.test_env)
        if bench is not None and not decided(e, spec):
            if reference and "reference" not in bench_sides:
                e.reference = ReferenceResult(error=sides.reference_missing)
            _sample(sides, e, bench_sides, bench, policy, quick=quick, measuring=measuring,
                    warmed=warmed.get("values"))
    finally:
        if bench is not None:
            bench.close()


def _correctness(sides: Sides, cand: Workspace, e: Evidence, changed: list[FileLines],
                 allocations: dict[str, tuple[str, list[int]]], *, bench: bool, lines_only: bool = False,
                 heal: bool = False, idle: Callable[[], None] | None = None) -> None:
    """The tests, plain and poisoned, and (`bench`) the bench once under the poisoned run's instruments;
    (`lines_only`, a quick check) under the line recorder alone, to learn which changed lines it runs.
    `heal`: the sanitizer zero-fills a changed line's buffer once it records its read, so one poisoned
    run names every buffer read uninitialised (agent.checks.sanitizer.prepare). That never turns a fail
    into a pass (the read it follows fails the change), but the poisoned tests no longer meet that garbage:
    for a search's checks, never a graded one. `idle`: work for the core the other runs leave while the
    poisoned one (the longest) still runs, where they go side by side: once every other run has passed."""
    spec = sides.task.spec.correctness
    workdir = sides.workdir
    py_files = [f.path for f in changed if f.path.endswith(".py")]
    folders = {name: coverage.prepare(workdir / name, cand.root, py_files, changed) if py_files else None
               for name in ("coverage", "bench-coverage")}
    reads = {name: (sanitizer.prepare(workdir / name, cand.root, py_files, spec.kernels,
                                      heal=changed if heal and name == "sanitizer" else None)
                    if py_files and spec.sanitizing and not (lines_only and name == "bench-sanitizer") else None)
             for name in ("sanitizer", "bench-sanitizer")}
    launcher = sides.tests()
    keys = {name: new_key() for name in ("plain", "poison", "bench")}  # no run can sign another's rows
    perf = sides.task.spec.perf
    bench = bench and perf is not None and bool(py_files)
    # At once on a CPU-only machine (halves the wall time), in as many lanes as it has cores for (the
    # poisoned run, the longest, in one; the plain run and then the bench's in another on two cores);
    # one after the other on a GPU, where two test processes could exhaust device memory. The poisoned
    # run (and the sanitizer in it) runs after a failing plain run too: it names the buffers read.
    names = ["plain", *(["poison"] if spec.poison else []), *(["bench"] if bench else [])]
    parallel = len(names) > 1 and not e.environment.gpu
    few = len(names) == 3 and (os.cpu_count() or 1) < 4
    # Side by side, a torch process's OpenMP threads spin while they wait for a core another run holds:
    # SGLang's two test runs burnt 63 CPU-s in 39 s so, 15 CPU-s in 15 s with waiting threads asleep.
    # Their number stays the task's; a wait policy of the task's own environment stays too.
    start_env = {"OMP_WAIT_POLICY": "PASSIVE"} if parallel and "OMP_WAIT_POLICY" not in launcher.env else {}
    # Where the bench's run follows the plain one, both fork from one warm server (one torch import
    # fewer), which holds both runs' folders writable: the plain run's lines are read before the
    # bench's run starts, and the bench's folders are made anew for it.
    shares = bench and (few or not parallel)
    own = {"plain": (folders["coverage"],), "bench": (folders["bench-coverage"], reads["bench-sanitizer"])}
    lines_run: dict[str, coverage.Recorded] = {}  # the plain run's lines, read as soon as it ends

    def shared(name: str) -> tuple[Path, ...]:
        other = {"plain": "bench", "bench": "plain"}.get(name)
        return tuple(d for d in own[other] if d is not None) if shares and other else ()

    def run(name: str) -> CommandRun:
        if name == "bench":
            assert perf is not None
            if shares:
                try:
                    coverage.prepare(workdir / "bench-coverage", cand.root, py_files, changed)
                    if reads["bench-sanitizer"] is not None:
                        sanitizer.prepare(workdir / "bench-sanitizer", cand.root, py_files, spec.kernels)
                except OSError as err:
                    raise CheckError(f"the bench's records could not be made anew after the tests: {err}") from None
            return run_check(name, perf.command, launcher, timeout_s=perf.timeout_s, poison=not lines_only,
                             lines_dir=folders["bench-coverage"], sanitize_dir=reads["bench-sanitizer"],
                             key=keys[name], shared=shared(name), start_env=start_env)
        done = run_check(name, spec.command, launcher, timeout_s=spec.timeout_s, poison=name == "poison",
                         lines_dir=folders["coverage"] if name == "plain" else None,
                         sanitize_dir=reads["sanitizer"] if name == "poison" else None, key=keys[name],
                         shared=shared(name), start_env=start_env)
        if name == "plain" and folders["coverage"] is not None:
            lines_run[name] = coverage.recorded(folders["coverage"], keys[name])
        return done

    sides.log(f"tests{' (' + ' + '.join(names) + ', in parallel)' if parallel else ''}: {spec.command}")
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = pool.submit(_find_read_sites, allocations)  # static, while the tests run
        if parallel:
            lanes = [["poison"], ["plain", "bench"]] if few else [[n] for n in names]
            # `idle` goes to the lane that ends the last run but the poisoned one, if all of those passed
            ahead = set(names) - {"poison"}
            passed: dict[str, bool] = {}
            lock = threading.Lock()

            def lane(mine: list[str]) -> dict[str, CommandRun]:
                done = {n: run(n) for n in mine}
                with lock:
                    passed.update((n, r.passed) for n, r in done.items() if n in ahead)
                    last = bool(ahead & set(done)) and passed.keys() == ahead and all(passed.values())
                if last and idle is not None and "poison" in names:
                    idle()
                return done

            done = [pool.submit(lane, mine) for mine in lanes]
            runs = {name: got for lane in done for name, got in lane.result().items()}
        else:
            runs = {}
            for name in names:
                if name != "plain":
                    sides.log("tests, poisoned (uninitialised memory = NaN / max int)" if name == "poison"
                              else f"bench under the sanitizer: {perf and perf.command}")
                runs[name] = run(name)
    plain, poison = runs["plain"], runs.get("poison")
    e.correctness = Correctness(plain=plain, poison=poison, poison_enabled=spec.poison)
    if reads["sanitizer"] is not None and poison is not None:
        e.sanitizer = sanitizer.collect(reads["sanitizer"], cand.root, changed, keys["poison"])
    bench_lines = None
    # a quick check's line run that failed says nothing the samples do not (they run the bench again)
    if "bench" in runs and folders["bench-coverage"] is not None and (runs["bench"].passed or not lines_only):
        bench_lines = coverage.recorded(folders["bench-coverage"], keys["bench"])
        e.bench_check = _bench_check(sides, cand.root, e, changed, runs["bench"], bench_lines,
                                     reads["bench-sanitizer"], keys["bench"])
    if changed:
        rec = lines_run.get("plain", coverage.Recorded(lines={}))
        e.coverage = coverage.classify(cand.root, changed, rec)
        if plain.passed:  # a run that stopped early leaves read sites unrun that a full run would reach
            watched = bench_lines if e.bench_check is not None and _watched(e.bench_check) else None
            e.read_sites = _read_sites(cand.root, found.result(), rec, watched)
        if e.bench_check is not None and e.bench_check.ran_whole and not lines_only:
            e.bench_check.skipped_after = _skipped_after(cand.root, e)
        if e.bench_check is not None and _watched(e.bench_check) and not lines_only:
            e.bench_check.unwritten_by_return = _unwritten_by_return(e)


def _skipped_after(root: Path, e: Evidence) -> dict[str, list[int]]:
    """For each uninitialised allocation of the patch that the tests and the bench both ran, the changed
    lines after it in its function that the tests ran and the bench did not: where the tests' proof of
    the buffer may rest on code the bench's configuration skips (a clear taken at the tests' sizes only).
    An allocation whose read sites the bench itself ran under the sanitizer needs no such proof."""
    b, cov = e.bench_check, e.coverage
    if b is None or cov is None or not cov.measured or e.sanitizer is None or not e.sanitizer.measured:
        return {}
    tested, benched = set(cov.changed) - set(cov.uncovered), set(b.ran)
    proven_in_bench = {s.buffer for s in e.read_sites if s.bench}
    out: dict[str, list[int]] = {}
    trees: dict[str, ast.Module | None] = {}
    for alloc in sorted(set(e.sanitizer.allocated) & benched & tested - proven_in_bench):
        path, line = alloc.rsplit(":", 1)
        if path not in trees:
            trees[path] = _parsed(root / path)
        span = _function_span(trees[path], int(line))
        skipped = sorted(int(x.rsplit(":", 1)[1]) for x in tested - benched
                         if x.rsplit(":", 1)[0] == path and span[0] < int(x.rsplit(":", 1)[1]) <= span[1])
        if skipped:
            out[alloc] = skipped
    return out


def _unwritten_by_return(e: Evidence) -> dict[str, list[int]]:
    """The uninitialised allocations of the patch whose buffers every test saw written in full when the call
    into the changed code that made them returned, and the bench's run did not: a clear taken at the tests'
    sizes only, however it is spelled (a slice `b[: n * (n <= 64)] = 0` runs every line at every size). An
    allocation whose read sites the bench ran under the sanitizer needs no such proof."""
    b, tests = e.bench_check, e.sanitizer
    if b is None or b.sanitizer is None or not b.sanitizer.measured or tests is None or not tests.measured:
        return {}
    changed = {f"{path}:{n}" for path, lines in e.changed_lines.items() for n in lines}
    proven_in_bench = {s.buffer for s in e.read_sites if s.bench}
    out: dict[str, list[int]] = {}
    for key, (made, whole) in b.sanitizer.by_return.items():
        site, seen = key.rsplit("#", 1)[0], tests.by_return.get(key, [0, 0])
        if site in changed and site not in proven_in_bench and seen[0] and seen[1] == seen[0] and whole < made:
            counts = out.setdefault(site, [0, 0])
            counts[0] += made
            counts[1] += whole
    return out


def _parsed(file: Path) -> ast.Module | None:
    try:
        return pyast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _function_span(tree: ast.Module | None, line: int) -> tuple[int, int]:
    """(line, last line) of the innermost function holding `line`; (line, line) where there is none."""
    if tree is None:
        return line, line
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= (n.end_lineno or 0)]
    return (line, max(spans, key=lambda s: s[0])[1]) if spans else (line, line)


def _watched(check: BenchCheck) -> bool:
    """Whether the bench's run shows reads: it ran to the end with its sanitizer trusted."""
    return check.run.passed and check.sanitizer is not None and check.sanitizer.measured


def _bench_check(sides: Sides, root: Path, e: Evidence, changed: list[FileLines], run: CommandRun,
                 lines: coverage.Recorded, reads_dir: Path | None, key: str) -> BenchCheck:
    """What the bench's run under the instruments shows; a failing one is weighed against the unchanged
    base's run under the same instruments, so a bench that cannot run poisoned blames no change."""
    found = sanitizer.collect(reads_dir, root, changed, key) if reads_dir is not None else None
    ran = coverage.classify(root, changed, lines).covered if lines.lines is not None else []
    tested = set(e.sanitizer.allocated) if e.sanitizer is not None and e.sanitizer.measured else None
    changed_at = {f"{f.path}:{n}" for f in changed for n in f.lines}
    only_here = ([a for a in found.allocated if a in changed_at and a not in tested]
                 if found is not None and found.measured and tested is not None else [])
    whole = lines.lines is not None and not lines.unkeyed and not lines.forged and run.passed
    check = BenchCheck(run=run, sanitizer=found, ran=ran, ran_whole=whole, only_here=only_here)
    if run.timed_out:
        return check.model_copy(update={"note": "the bench under the sanitizer timed out: its reads are not measured"})
    if not run.passed:
        base = sides.bench_at_base()
        if not base.passed:
            return check.model_copy(update={
                "base_fails": True,
                "note": f"the bench fails under poisoned memory on the unchanged base too (exit {base.exit_code})"})
    return check


def _bench_sides(sides: Sides, cand: Workspace, reference: bool) -> dict[str, Path]:
    out = {"baseline": sides.baseline().root, "candidate": cand.root}
    ref = sides.reference() if reference else None
    if ref is not None:
        out["reference"] = ref.root
    return out


def _bench(sides: Sides, bench_sides: dict[str, Path]) -> Bench:
    spec = sides.task.spec.perf
    assert spec is not None
    return Bench(spec, bench_sides, sides.workdir / "bench", bin_dir=sides.interpreter().bin_dir,
                 sandbox=sides.sandbox, runner=sides.runner, warm=sides.warm,
                 hook=clocks.install(sides.workdir / "bench-hook"))


def _sample(sides: Sides, e: Evidence, bench_sides: dict[str, Path], bench: Bench, policy: SamplingPolicy, *,
            quick: bool, measuring: Measuring, warmed: dict[str, list[float]] | None = None) -> None:
    """Interleaved samples of every side by `policy`, holding the device's lock (`warmed`: its warm-up
    rounds, taken already). A reference whose bench fails is dropped and the rest measured again; a
    baseline whose bench fails makes the task uncheckable."""
    spec = sides.task.spec.perf
    assert spec is not None
    seed = measuring.seed if measuring.seed is not None else secrets.randbelow(2**31)
    device = e.environment.device or "cpu"
    result = PerfResult(metric=spec.metric, direction=spec.direction, min_effect=spec.min_effect, seed=seed,
                        device=device)
    asked = time.monotonic()
    with device_lock(device, measuring.lock_dir, sides.log):
        start = time.monotonic()
        result.lock_wait_s = round(start - asked, 2)
        result.started_at = round(time.time(), 3)
        samples = None
        try:
            while samples is None and result.error is None:
                bench.learn = policy.warmup > 0 and warmed is None  # from the baseline's first run, a warm-up
                try:
                    samples = perfmod.sample(bench_sides, spec, policy, seed=seed, log=sides.log, bench=bench,
                                             warmed=warmed)
                except BenchError as err:
                    if err.side == "reference" and "reference" in bench_sides:  # rare: drop it, measure again
                        e.reference = ReferenceResult(error=str(err))
                        bench_sides = {k: v for k, v in bench_sides.items() if k != "reference"}
                        bench.close()
                        bench, warmed = _bench(sides, bench_sides), None
                    else:
                        result.error, result.error_side = str(err), err.side
            c = samples.comparison if samples is not None else None
            if samples is not None and c is not None and not quick and firstcall.needed(c.verdict, c.ratio, spec):
                result.first_call = (_first_calls_sampled(spec, seed, samples) if spec.first_call_metric
                                     else _first_call(sides, bench_sides, spec, seed, bench))
        finally:
            result.processes = bench.mode
            if learned := getattr(bench, "learned", 0):
                sides.log(f"perf: the warm server imported {learned} installed modules the baseline's "
                          "warm-up imported, once for every later sample")
            bench.close()
            if getattr(bench, "clocks", None) is not None:  # the timing functions, as each bench process found them
                e.clocks = e.clocks or clocks.ClockCheck()
                e.clocks.merge(bench.clocks)
            result.duration_s = round(time.monotonic() - start, 2)  # inside the lock: never overlaps another
    e.perf = result
    if result.error is not None:
        if result.error_side != "candidate":
            raise CheckError(result.error)
        return
    assert samples is not None and samples.comparison is not None
    c = samples.comparison
    e.perf = judge_perf(result.model_copy(update={  # the samples; grade's pure function says what they show
        "unit": samples.unit, "timer": samples.timer, "baseline_samples": samples.values["baseline"],
        "candidate_samples": samples.values["candidate"], "warmup_samples": samples.warmup,
        "warmups_discarded": policy.warmup, "n_pairs": len(samples.values["candidate"]), "alpha": c.alpha,
        "max_pairs": policy.max_pairs, "stop_reason": c.stop_reason, "lines": samples.lines,
        "conditions": samples.conditions}), spec)
    # the harness's own clock on the same processes; grade judges it again under the task as it is then
    e.perf.outside = confirm.judge(e.perf, confirm.figures(samples.wall, samples.cpu),
                                   calls=spec.calls or samples.lines, max_speedup=spec.max_speedup)
    if "reference" in samples.values:
        e.reference = judge_reference(e.perf, ReferenceResult(samples=samples.values["reference"]))


def _first_call(sides: Sides, bench_sides: dict[str, Path], task: PerfSpec, seed: int, bench: Bench) -> FirstCall:
    """The first call of baseline and candidate alone, interleaved in fresh processes (agent.checks.firstcall),
    by `bench`: the sampling's own, whose server forks them as it forked the samples. A baseline whose first
    call fails is the task's fault; a candidate's is its error."""
    assert task.first_call is not None
    cold = task.model_copy(update={"command": task.first_call, "calls": 1})
    pair = {k: v for k, v in bench_sides.items() if k in ("baseline", "candidate")}
    sides.log(f"perf: the first call alone, in fresh processes ({task.first_call})")
    try:
        s = perfmod.sample(pair, cold, FIRST_CALL, seed=seed, log=sides.log, bench=bench)
    except BenchError as e:
        if e.side != "candidate":
            raise CheckError(f"the task's first_call command: {e}") from None
        return FirstCall(command=task.first_call, seed=seed, error=str(e))
    return FirstCall(command=task.first_call, seed=seed, baseline_samples=s.values["baseline"],
                     candidate_samples=s.values["candidate"],
                     alpha=s.comparison.alpha if s.comparison is not None else FirstCall().alpha)


def _first_calls_sampled(task: PerfSpec, seed: int, samples: perfmod.Samples) -> FirstCall:
    """The first call alone as the samples' own processes timed it (the task's first_call_metric): each
    was a fresh process in which nothing ran before that call, so no round of its own is needed."""
    c = samples.comparison
    return FirstCall(command=f"{task.command} ({task.first_call_metric})", seed=seed,
                     baseline_samples=samples.first["baseline"], candidate_samples=samples.first["candidate"],
                     alpha=c.alpha if c is not None and c.alpha is not None else FirstCall().alpha)


def diff_stats(ws: Workspace) -> DiffStats:
    ws.changed_files()  # stages everything
    files, ins, dels = [], 0, 0
    for line in ws.repo.git.diff("--cached", "--numstat", "--no-ext-diff", "--no-textconv",
                                 ws.base_commit).splitlines():
        a, d, path = line.split("\t", 2)
        files.append(path)
        ins += int(a) if a.isdigit() else 0
        dels += int(d) if d.isdigit() else 0
    return DiffStats(files=files, insertions=ins, deletions=dels)


_UNINITIALISED = re.compile(r"\b(empty|empty_like|new_empty|empty_strided|new_empty_strided|UntypedStorage|"
                            r"TypedStorage|ndarray|resize_)\s*\(")


def uninitialised_allocations(root: Path, changed: list[FileLines]) -> dict[str, tuple[str, list[int]]]:
    """Changed Python files' text and the changed lines in them that allocate uninitialised memory."""
    out: dict[str, tuple[str, list[int]]] = {}
    for fl in changed:
        if not fl.path.endswith(".py"):
            continue
        try:
            text = (root / fl.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        source = text.splitlines()
        allocs = [n for n in fl.lines if 0 < n <= len(source) and _UNINITIALISED.search(source[n - 1])]
        if allocs:
            out[fl.path] = (text, allocs)
    return out


def _find_read_sites(allocations: dict[str, tuple[str, list[int]]]) -> dict[str, dict]:
    """Every read of a buffer the patch allocates uninitialised (static analysis), per file."""
    out = {}
    for path, (text, allocs) in allocations.items():
        try:
            out[path] = read_sites(text, allocs, path)
        except cst.ParserSyntaxError:
            continue
    return out


def _read_sites(root: Path, found_in: dict[str, dict], rec: coverage.Recorded,
                bench: coverage.Recorded | None) -> list[ReadSiteResult]:
    """Whether the tests ran each read site: one no test reaches is a path on which nothing shows
    the buffer is written first, unless the bench ran it under the sanitizer (`bench`), which did."""
    out: list[ReadSiteResult] = []
    for path, found in found_in.items():
        ran = coverage.statements_run(root / path, rec)
        if ran is None:
            continue
        benched = (coverage.statements_run(root / path, bench) if bench is not None else None) or set()
        for line, sites in sorted(found.items()):
            out += [ReadSiteResult(buffer=f"{path}:{line}", line=s.line, function=s.function, how=s.how,
                                   guard=s.guard, executed=s.statement in ran, bench=s.statement in benched)
                    for s in sites]
    return out

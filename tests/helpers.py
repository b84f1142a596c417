"""Builders the test modules share: small real repos, a checks fixture package, results folders.

Test modules import from here (or use conftest's fixtures), never from each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import random
from dataclasses import dataclass, field
from pathlib import Path

import git

from agent.checks import (CommandRun, Correctness, CoverageResult, DiffStats, Environment, Evaluation, Evidence,
                          PerfResult, ReferenceResult, compare)
from agent.env.workspace import Workspace
from agent.models.base import Usage
from agent.models.pricing import cost_usd, load_prices
from agent.results.layout import model_slug
from agent.results.ledger import Ledger
from agent.results.load import summarize_run
from agent.results.record import JobRecord, figures_from_report
from agent.results.report import Report
from agent.results.tables import write_summary
from agent.run.loop import Outcome
from agent.run.graded import report_of
from agent.util.files import write_json
from agent.task import load_task

@dataclass
class Ran:
    """What a command line gave back: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


# -- the bundled target ------------------------------------------------------------------------------
def all_empty(repo: Path) -> int:
    """Turn every torch.zeros in target_repo's init_cuda_graph_state into torch.empty (the naive change,
    several of whose buffers are read before they are written); returns how many."""
    path = repo / "miniattn" / "flashattention_backend.py"
    src = path.read_text()
    start = src.index("    def init_cuda_graph_state")
    end = src.index("\n    def ", start + 1)
    body = src[start:end]
    n = body.count("torch.zeros(")
    path.write_text(src[:start] + body.replace("torch.zeros(", "torch.empty(") + src[end:])
    return n


# -- real git repos ---------------------------------------------------------------------------------
AUTHOR = git.Actor("test", "test@localhost")


@contextlib.contextmanager
def machine_share(exclusive: bool):
    """Under `pytest -n`, whatever measures timings holds the suite's machine lock exclusively (it runs
    alone), every other test holds it shared. A serial run never waits. The lock lives in the suite's
    PERFAGENT_LOCK_DIR, which the workers inherit from the controller (tests/conftest.py). Nested, it
    takes nothing more: a second lock of one process on the same file would wait for itself."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None or _MACHINE_SHARE:
        yield
        return
    with open(Path(os.environ["PERFAGENT_LOCK_DIR"]) / "suite-machine.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        _MACHINE_SHARE.append(exclusive)
        try:
            yield
        finally:
            _MACHINE_SHARE.pop()


_MACHINE_SHARE: list[bool] = []  # this process's hold on the suite's machine lock, while it has one


@contextlib.contextmanager
def key_fd(key: str):
    """A descriptor holding `key`, as agent.checks.launch hands it to a cold command's check hook."""
    fd = os.memfd_create("perfagent-key", 0)
    try:
        os.write(fd, key.encode())
        yield fd
    finally:
        os.close(fd)


def make_repo(path: Path, files: dict[str, str], message: str = "init") -> git.Repo:
    """A real git repo at `path` with `files` committed."""
    repo = git.Repo.init(path)
    for name, text in files.items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    repo.index.add(list(files))
    repo.index.commit(message, author=AUTHOR, committer=AUTHOR)
    return repo


# -- a small torch package with tests and a bench, for the checks ---------------------------------------
REPO = Path(__file__).resolve().parents[1]
# ISO-Bench's stored run for sglang 205d5cb4: the public 23-edit patch, graded in tests/interchange/test_iso_bench.py
ISO_BENCH_SEED = (REPO / "tests" / "data" / "iso_bench_seed" / "state" / "runs" / "sglang" / "claude_code" / "default"
                  / "2025-12-23_06-28-44")

FIXTURE = {
    "pkg/__init__.py": "",
    "pkg/buffers.py": '''import torch

N = 2_000_000


def staged(src):
    """A scratch copy: every element is written before it is read."""
    buf = torch.zeros(src.shape, dtype=src.dtype)
    buf.copy_(src)
    return buf


def half_ones():
    """Relies on the zero fill: only the first half is written."""
    buf = torch.zeros(N)
    buf[: N // 2] = 1.0
    return buf
''',
    "pkg/work.py": '''ITERS = 60_000


def spin(iters=None):
    x = 0.0  # a float: every iteration costs the same (an int past 2**30 adds slower)
    for i in range(ITERS if iters is None else iters):
        x += i
    return x


def never_called():
    return "nobody tests this"
''',
    "tests/test_pkg.py": '''import torch

from pkg.buffers import half_ones, staged
from pkg.work import spin


def test_staged():
    src = torch.arange(6.0)
    assert torch.equal(staged(src), src)


def test_half_ones():
    assert half_ones().sum().item() == 1_000_000


def test_spin():
    assert spin(10) == 45
''',
    "bench/bench.py": '''import json
import time

from pkg.work import spin

times = []
for _ in range(25):
    t = time.perf_counter()
    spin()
    times.append((time.perf_counter() - t) * 1000)
print("warming up")
print(json.dumps({"metric": "other_ms", "value": 1.0, "unit": "ms"}))
print(json.dumps({"metric": "spin_ms", "value": min(times), "unit": "ms"}))
''',
}

TESTS = "python -m pytest -q -p no:cacheprovider tests"


# A kernel stub that checks its metadata, as SGLang's test stubs do: the first garbage it meets raises, so
# with both buffers uninitialised, the second one's read never happens in a run that leaves the garbage there.
CONTRACT = {"pkg/__init__.py": "", "pkg/contract.py": """\
import torch


class Metadata:
    def __init__(self, n):
        self.starts = torch.zeros(n, dtype=torch.int32)  # line 6
        self.lens = torch.zeros(n, dtype=torch.int32)  # line 7


def kernel(m):
    for name in ("starts", "lens"):
        if any(v != 0 for v in getattr(m, name).tolist()):
            raise ValueError(f"{name} breaks the kernel's contract")
    return 0
""", "tests/test_contract.py": """\
from pkg.contract import Metadata, kernel


def test_a_fresh_batch_runs():
    assert kernel(Metadata(8)) == 0
"""}


def contract_task(tmp_path: Path):
    """CONTRACT's repo and a task of its tests alone (no bench); returns (task, repo path)."""
    src = tmp_path / "src"
    make_repo(src, CONTRACT)
    toml = tmp_path / "task.toml"
    toml.write_text(f'id = "contract"\nrepo = "{src}"\nprompt = "p"\nprotected = ["tests/**"]\n'
                    f'[correctness]\ncommand = "{TESTS}"\n')
    return load_task(toml), src


def make_task(tmp_path: Path, *, correctness: str = TESTS, poison: bool = True, perf: str = "python bench/bench.py",
              metric: str = "spin_ms", min_effect: float = 0.05, extra: str = "", files: dict | None = None):
    """A fixture repo with its task file; returns (task, repo path)."""
    src = tmp_path / "src"
    make_repo(src, files or FIXTURE)
    toml = tmp_path / "task.toml"
    toml.write_text(f'''id = "fixture"
repo = "{src}"
prompt = "make it faster"
protected = ["tests/**", "bench/**"]
{extra}
[correctness]
command = "{correctness}"
poison = {str(poison).lower()}
timeout_s = 120

[perf]
command = "{perf}"
metric = "{metric}"
min_effect = {min_effect}
timeout_s = 60
''')
    return load_task(toml), src


def make_patch(src: Path, tmp_path: Path, edits: dict[str, tuple[str, str] | str]) -> str:
    """A diff against HEAD of `src`: (old, new) replaces text in a file, a str writes a new file."""
    ws = Workspace.create(src, "HEAD", tmp_path / f"patch-{len(list(tmp_path.glob('patch-*')))}")
    for path, edit in edits.items():
        f = ws.root / path
        if isinstance(edit, str):
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(edit)
        else:
            old, new = edit
            assert old in f.read_text(), (path, old)
            f.write_text(f.read_text().replace(old, new))
    diff = ws.diff()
    ws.cleanup()
    return diff


SAFE = {"pkg/buffers.py": ("buf = torch.zeros(src.shape, dtype=src.dtype)",
                           "buf = torch.empty(src.shape, dtype=src.dtype)")}
UNSAFE = {"pkg/buffers.py": ("buf = torch.zeros(N)", "buf = torch.empty(N)")}


class RecordedChecker:
    """The grader seam: for tests of what happens above the checks (the loop, what a run emits), the
    evidence on each diff is the test's to choose, and the real grade() judges it; nothing runs."""

    def __init__(self, task, evidence):
        self.task = task
        self.evidence = evidence  # diff -> Evidence
        self.patches: list[str] = []

    def collect(self, patch: str, *, quick: bool = False, perf: bool = True, reference: bool = False) -> Evidence:
        self.patches.append(patch)
        return self.evidence(patch).model_copy(update={"task_id": self.task.id, "quick": quick})

    def check_base(self) -> None:
        """The task's base passes: what a test of the layers above chooses."""

    def bin_dir(self) -> None:
        return None

    def close(self) -> None:
        pass


def poisoned_evidence(patch: str, unsafe: str, failing_test: str) -> Evidence:
    """Recorded evidence of a small repo: the tests pass, and also under poisoned memory unless the patch
    holds `unsafe` (a buffer read before it is written), which fails `failing_test` there."""
    if not patch.strip():
        return Evidence(changes=False)
    plain = CommandRun(name="plain", command="pytest", exit_code=0, passed=True, duration_s=0.5)
    poisoned = plain.model_copy(update={"name": "poison"})
    if unsafe in patch:
        poisoned = poisoned.model_copy(update={"exit_code": 1, "passed": False, "failing_tests": [failing_test]})
    return Evidence(correctness=Correctness(plain=plain, poison=poisoned), duration_s=1.0)


def tiny_evidence(patch: str) -> Evidence:
    """What the checks find on make_task's repo: UNSAFE's buffer is read before it is written."""
    return poisoned_evidence(patch, "+    buf = torch.empty(N)", "tests/test_buffers.py::test_half_ones")


def tiny_task_evidence(patch: str) -> Evidence:
    """What the checks find on make_tiny_task's repo: f's buffer may be empty; g's (read before it is all
    written: the line after it in the diff is g's partial fill) fails test_g under poisoned memory."""
    return poisoned_evidence(patch, "+    buf = torch.empty(n)\n     buf[: n // 2] = 1.0", "tests/test_mod.py::test_g")


# -- results folders in the shapes a run or a batch leaves ---------------------------------------------
SONNET = "anthropic:claude-sonnet-4-5"
DIFF = """\
diff --git a/miniattn/flashattention_backend.py b/miniattn/flashattention_backend.py
--- a/miniattn/flashattention_backend.py
+++ b/miniattn/flashattention_backend.py
@@ -10,3 +10,3 @@ def init_cuda_graph_state(self, max_bs):
-        self.cache_seqlens = torch.zeros(max_bs, dtype=torch.int32)
+        self.cache_seqlens = torch.empty(max_bs, dtype=torch.int32)
         self.page_table = torch.zeros(max_bs, 64, dtype=torch.int32)
"""


@dataclass
class Job:
    task: str
    model: str
    sample: int
    verdict: str = "pass"
    speedup: float | None = 1.5  # None: no perf measurement
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=1200, output_tokens=900, cache_write_5m=5000,
                                                       cache_read=40000))
    turns: int = 6
    uncovered: list[str] = field(default_factory=list)
    denied: bool = False
    rejected: bool = False  # no candidate passed: an empty model_patch.diff and the failing state in rejected.diff

    @property
    def key(self) -> str:
        return f"{self.task}/{model_slug(self.model)}/s{self.sample}"


def evaluation(job: Job, seed: int) -> dict:
    rng = random.Random(seed)
    perf = None
    if job.speedup is not None:
        base = [10.0 + rng.gauss(0, 0.15) for _ in range(8)]
        cand = [b / job.speedup + rng.gauss(0, 0.1) for b in base]
        c = compare(base, cand, "lower", n_resamples=500)
        perf = PerfResult(metric="init_ms", direction="lower", unit="ms", baseline_samples=base, candidate_samples=cand,
                          n_pairs=8, baseline_median=c.baseline_median, candidate_median=c.candidate_median,
                          ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high, p_value=c.p_value, verdict=c.verdict)
    plain = CommandRun(name="plain", command="python -m pytest -q tests", exit_code=0, passed=True, duration_s=2.1)
    poison_ok = job.verdict != "fail"
    poison = CommandRun(name="poison", command="python -m pytest -q tests", exit_code=0 if poison_ok else 1,
                        passed=poison_ok, duration_s=2.4,
                        failing_tests=[] if poison_ok else ["tests/test_graph.py::test_replay"])
    changed = ["miniattn/flashattention_backend.py:11", *job.uncovered]
    ev = Evaluation(task_id=job.task, verdict=job.verdict,  # type: ignore[arg-type]
                    reasons=[] if job.verdict == "pass" else [f"the run is {job.verdict}"],
                    diff_stats=DiffStats(files=["miniattn/flashattention_backend.py"], insertions=1, deletions=1),
                    correctness=Correctness(plain=plain, poison=poison),
                    coverage=CoverageResult(changed=changed, covered=changed[:1], uncovered=job.uncovered),
                    perf=perf, reference=ReferenceResult(speedup=2.0, fraction_of_reference=0.5) if perf else None,
                    environment=Environment(cpu="test cpu", torch="2.13.0", python="3.11.7"))
    return ev.model_dump(mode="json")


def write_job(out: Path, run_id: str, job: Job, seed: int = 0, key: str | None = None) -> Report:
    """One finished job: report.json (by the report writer), trajectory, checks.json, the patch(es)."""
    model_id = job.model.split(":", 1)[-1]
    offline = job.model == "rules"
    outcome = Outcome(subtype="success", result=f"## Done\n\nReplaced `torch.zeros` with `torch.empty` ({job.key}).",
                      num_turns=job.turns, duration_s=42.0, api_duration_s=30.0,
                      usage_by_model={model_id: Usage() if offline else job.usage},
                      cost_by_model={model_id: 0.0 if offline else cost_usd(model_id, job.usage, load_prices())})
    denials = [{"tool_name": "edit_file", "tool_use_id": "t1", "tool_input": {"path": "tests/test_graph.py"},
                "reason": "tests/test_graph.py is protected"}] if job.denied else []
    report = report_of(outcome, session_id=f"s-{seed}", evaluation=evaluation(job, seed), permission_denials=denials)
    key = key or job.key
    res = out / "results" / run_id / key
    report.write(res / "report.json")
    (res / "trajectory.jsonl").write_text(json.dumps({"type": "start", "task": job.task}) + "\n")
    write_json(res / "checks.json", [])
    patches = out / "patches" / run_id / key
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "model_patch.diff").write_text("" if job.rejected else DIFF)
    if job.rejected:
        (patches / "rejected.diff").write_text(DIFF)
    return report


def rec(task="t", model="m", sample=0, status="done", verdict="pass", speedup=None, ref=None, has_ref=False,
        **kw) -> JobRecord:
    """A job record as the ledger holds it, for the pure summary tests."""
    return JobRecord(key=f"{task}/{model_slug(model)}/s{sample}", task=task, model=model, sample=sample, status=status,
                     verdict=verdict, speedup=speedup, reference_speedup=ref, has_reference=has_ref, **kw)


def make_batch(out: Path, run_id: str = "batch-a", *, jobs: list[Job] | None = None, damage: bool = True) -> Path:
    """A batch run folder as the batch leaves it; `damage` adds a corrupt and a missing report.json."""
    jobs = jobs if jobs is not None else default_jobs()
    ledger = Ledger(out / "results" / run_id)
    for i, job in enumerate(jobs):
        report = write_job(out, run_id, job, seed=i)
        ledger.append(JobRecord(key=job.key, task=job.task, model=job.model, sample=job.sample, status="done",
                                has_reference=True, report=f"results/{run_id}/{job.key}/report.json",
                                patch=f"patches/{run_id}/{job.key}/model_patch.diff", wall_s=45.0,
                                **figures_from_report(report)))
    run_dir = out / "results" / run_id
    if damage:
        corrupt = Job("metadata-alloc", SONNET, 1)
        write_job(out, run_id, corrupt, seed=99)
        ledger.append(JobRecord(key=corrupt.key, task=corrupt.task, model=corrupt.model, sample=1, status="done",
                                report=f"results/{run_id}/{corrupt.key}/report.json", verdict="pass", speedup=1.2,
                                cost_usd=0.05, num_turns=4))
        (run_dir / corrupt.key / "report.json").write_text('{"type": "result", "subtype": "succ')  # torn write
        crashed = run_dir / "metadata-alloc" / "rules" / "s1"  # the job died before writing its report
        crashed.mkdir(parents=True)
        (crashed / "trajectory.jsonl").write_text(json.dumps({"type": "start"}) + "\n")
    write_summary(run_dir, summarize_run(run_dir))
    return run_dir


def default_jobs() -> list[Job]:
    return [
        Job("cuda-graph-buffers", SONNET, 0, speedup=1.8, denied=True),
        Job("cuda-graph-buffers", SONNET, 1, verdict="fail", speedup=1.9),
        Job("cuda-graph-buffers", "rules", 0, speedup=1.6, turns=3),
        Job("cuda-graph-buffers", "rules", 1, verdict="unverified", speedup=1.2, uncovered=["miniattn/x.py:7"]),
        Job("metadata-alloc", SONNET, 0, speedup=1.05),
        Job("metadata-alloc", "rules", 0, speedup=None),
        Job("rope-cache", SONNET, 0, verdict="fail", speedup=None, rejected=True),
    ]


# A tiny task for agent runs: f fills every element before reading it (torch.empty is safe there);
# g, with_g, relies on the zero fill (it is not).
TINY_TOML = '''
id = "{id}"
repo = "src"
prompt = "Use torch.empty where zeros are not needed."
focus = ["pkg/mod.py"]
protected = ["tests/**"]
[correctness]
command = "python -m pytest -q -p no:cacheprovider tests"
'''


def make_tiny_task(root: Path, *, task_id: str = "tiny", with_g: bool = True, extra: str = "",
                   file: str = "tiny.toml") -> Path:
    """The tiny repo under root/src and its task file (`extra` appended: more [correctness] keys, [budget])."""
    mod = "import torch\n\n\ndef f(n):\n    buf = torch.zeros(n)\n    buf.copy_(torch.arange(n))\n    return buf\n"
    test = "from pkg.mod import f\n\n\ndef test_f():\n    assert f(4).tolist() == [0, 1, 2, 3]\n"
    if with_g:
        mod += "\n\ndef g(n):\n    buf = torch.zeros(n)\n    buf[: n // 2] = 1.0\n    return buf\n"
        test = test.replace("import f", "import f, g") + "\n\ndef test_g():\n    assert g(1000).sum().item() == 500\n"
    make_repo(root / "src", {"pkg/__init__.py": "", "pkg/mod.py": mod, "tests/test_mod.py": test})
    (root / file).write_text(TINY_TOML.format(id=task_id) + extra)
    return root / file


def perfagent_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`perfagent ARGS` as a subprocess in `cwd`, with a bare environment (HOME there, the suite's locks)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COLUMNS": "200", "HOME": str(cwd),
           "PERFAGENT_LOCK_DIR": os.environ["PERFAGENT_LOCK_DIR"]}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, check=False, timeout=300)


def commit(repo, files: dict[str, str], message: str) -> str:
    root = Path(repo.working_tree_dir)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    repo.index.add(list(files))
    return repo.index.commit(message, author=AUTHOR, committer=AUTHOR).hexsha

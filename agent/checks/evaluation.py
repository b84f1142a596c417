"""The typed result of one evaluation; serialised as report.json's `evaluation`.

Every field a reader needs to trust a verdict is here: the raw samples behind a ratio,
the exact lines that no test executed, the machine the numbers came from.
"""

from __future__ import annotations

from pydantic import BaseModel, computed_field

from agent.checks.conditions import Conditions
from agent.checks.integrity import IntegrityResult
from agent.checks.stats import Direction, speedup
from agent.checks.verdicts import PerfVerdict, Verdict  # the vocabulary: agent.checks.verdicts


class CommandRun(BaseModel):
    """One run of a check command in a workspace."""

    name: str  # "plain", "poison", "setup"
    command: str
    exit_code: int
    passed: bool
    timed_out: bool = False
    duration_s: float
    output_tail: str = ""
    failing_tests: list[str] = []
    escaped: str | None = None  # what the sweep after it could not end (agent.env.sandbox.CommandResult)
    first_error: str | None = None  # a failed run's first line that explains it (an exception, a collection error)


class Correctness(BaseModel):
    plain: CommandRun
    # None when the task turns poison off (or, before 2026-11, the plain run failed on a GPU)
    poison: CommandRun | None = None
    poison_enabled: bool = True


class CoverageResult(BaseModel):
    """Which added or changed executable lines the correctness run executed ("file:line")."""

    measured: bool = True  # False: coverage could not be collected at all
    changed: list[str] = []
    covered: list[str] = []
    uncovered: list[str] = []  # not run in full: some statement on the line never ran (a one-line def's body...)
    # arms of the changed conditionals (agent.checks.arms), "file:line (the else arm)"
    taken: list[str] = []
    untaken: list[str] = []
    not_measured: list[str] = []  # "file:line": whether every statement and arm ran is not known (Python < 3.11)
    unmeasured_files: list[str] = []  # changed files that are not Python: no line data
    note: str | None = None


class UninitRead(BaseModel):
    """One buffer read before it was written, as the sanitizer saw it (paths repo-relative)."""

    buffer: str  # "file:line" of the uninitialised allocation
    code: str = ""  # that line's source, stripped
    op: str  # the op (or kernel) that read it, e.g. "aten.cumsum.default", "kernel sgl_kernel.flash_attn..."
    argument: str | None = None  # which of the op's arguments
    uninitialised: int = 0  # elements never written, of `elements` the op read (first time seen)
    elements: int = 0
    index: list[int] = []  # the first such element, in the read view's coordinates
    at: str | None = None  # where the op was called: "file:line (function)"
    via: str | None = None  # the changed file's frame that led there, when `at` is elsewhere
    tests: list[str] = []  # the tests (or modes) in which it happened


class SanitizerResult(BaseModel):
    """Reads of uninitialised memory in the poisoned run, whether or not a test failed. `reads` are the
    buffers the patch allocates uninitialised (on its changed lines); `elsewhere` are other allocations
    in the changed files, already uninitialised at base."""

    measured: bool = True
    reads: list[UninitRead] = []
    elsewhere: list[UninitRead] = []
    allocated: list[str] = []  # "file:line" of the changed files' lines that allocated uninitialised memory
    unwatched: list[str] = []  # "file:line: what": tensors over memory no watched allocator made (ctypes, ...)
    # "file:line#n" (the n-th buffer one call into the changed files made on that line) -> [such buffers, those
    # written in full when their call returned]: where the tests' proof rests on a write one configuration skips
    by_return: dict[str, list[int]] = {}
    tampered: bool = False  # a process's records or closing record do not add up: `note` says how
    note: str | None = None  # why nothing was measured; or, measured, how far the records can be trusted


class DeviceRead(BaseModel):
    """Reads of uninitialised device memory that compute-sanitizer's initcheck reported, per kernel."""

    kernel: str  # the kernel (or the API call, for a host access), offsets and file:line stripped
    kind: str  # "global read", or "host API access" (a cudaMemcpy of uninitialised device memory)
    size: int | None = None  # bytes per access, as the tool gave it
    count: int = 1  # reports seen (the tool stops printing at its print limit)


class InitcheckResult(BaseModel):
    """The correctness command under `compute-sanitizer --tool initcheck`, candidate against baseline.
    `reads` are kernels that read uninitialised device memory on the candidate only; `at_base` the
    ones the unchanged baseline already reported; `copies` copy kernels that did (a copy is not a use:
    as in the sanitizer and MSan, unwritten elements copied along matter only where they are used)."""

    measured: bool = True
    reads: list[DeviceRead] = []
    at_base: list[DeviceRead] = []
    copies: list[DeviceRead] = []
    errors: int | None = None  # the candidate's "ERROR SUMMARY" count
    tool: str | None = None  # the tool's version line (or its banner), and where it was found
    run: CommandRun | None = None  # the candidate's test run under the tool
    baseline_s: float | None = None  # the baseline's run under the tool
    note: str | None = None  # why nothing was measured


class ReadSiteResult(BaseModel):
    """Where each buffer the patch made uninitialised is read (static analysis), and whether a test ran it."""

    buffer: str  # "file:line"
    line: int  # the read's line in the same file
    function: str | None = None
    how: str = ""
    guard: str | None = None  # the conditions on the way to it (its path)
    executed: bool = False
    bench: bool = False  # the bench ran it under the sanitizer, which saw no read of unwritten elements


class BenchCheck(BaseModel):
    """The task's bench command, run once on the candidate under the tests' instruments (poisoned
    memory, the sanitizer, changed-line recording): a change that behaves differently under the bench
    than under the tests (a size, a module, argv) meets the evidence at the bench's sizes. The bench
    asserts nothing: what it shows is reads of unwritten memory, and which changed lines it ran."""

    run: CommandRun
    sanitizer: SanitizerResult | None = None
    ran: list[str] = []  # changed lines ("file:line") the bench ran
    ran_whole: bool = False  # every process of the bench recorded its lines, signed: `ran` is all it ran of them
    only_here: list[str] = []  # changed lines that allocated uninitialised memory here but never in the tests
    # an uninitialised allocation the bench ran ("file:line") -> the changed lines after it in its function that
    # the tests ran and the bench did not: the tests' proof of the buffer may rest on them (a size-gated clear)
    skipped_after: dict[str, list[int]] = {}
    # uninitialised allocations ("file:line") the tests always saw written in full by the time the call that
    # made them returned, and the bench did not: the same, however the skipped write was spelled
    unwritten_by_return: dict[str, list[int]] = {}  # -> [the bench's buffers, those written in full]
    base_fails: bool = False  # the unchanged base's bench fails under the same instruments too
    note: str | None = None


class Hygiene(BaseModel):
    ok: bool = True
    problems: list[str] = []


class DiffStats(BaseModel):
    files: list[str] = []
    insertions: int = 0
    deletions: int = 0


class ClockSaving(BaseModel):
    """What one outside clock saw the candidate's bench process save per process, in seconds: the
    Hodges-Lehmann estimate of the paired per-round differences (baseline - candidate), with its
    distribution-free signed-rank interval."""

    estimate_s: float
    low_s: float
    high_s: float
    confidence: float = 0.95
    pairs: int = 0
    sees_saving: bool = False  # above zero at the level a confirmation needs (agent.checks.confirm.STRICT)


class OutsideClock(BaseModel):
    """The harness's own view of each bench process, out of the code's reach (agent.checks.confirm):
    wall time (from its start to its exit) and CPU time (kernel accounting, its children included),
    per side and round; and whether they see the gain the metric line claims."""

    baseline_wall_s: list[float] = []
    candidate_wall_s: list[float] = []
    baseline_cpu_s: list[float] = []
    candidate_cpu_s: list[float] = []
    calls: int = 1  # timed calls per bench process (the task's `perf.calls`, else the metric's lines)
    claimed_s: float | None = None  # the saving per process the metric claims; None: not a time metric
    claimed_low_s: float | None = None  # the least of it the metric's own interval supports: what must be seen
    wall: ClockSaving | None = None
    cpu: ClockSaving | None = None
    confirmed: bool | None = None  # None: not applied (not "faster", or no outside figures)
    refuted: bool | None = None  # a clock rules the claim out; False with confirmed False: no clock could tell
    note: str = ""


class FirstCall(BaseModel):
    """The first call alone, timed in fresh processes, one call each, interleaved A/B
    (agent.checks.firstcall): a gain the repeated calls show must show here too."""

    command: str = ""
    baseline_samples: list[float] = []
    candidate_samples: list[float] = []
    seed: int = 0
    alpha: float = 0.05  # the per-look level sampling stopped at
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: PerfVerdict | None = None
    error: str | None = None  # the candidate's first call failed
    note: str = ""


class PerfResult(BaseModel):
    """Candidate against baseline, interleaved processes; ratio = the per-round ratios' Hodges-Lehmann
    estimate (paired analysis), candidate / baseline."""

    metric: str
    direction: Direction
    unit: str | None = None
    baseline_samples: list[float] = []
    candidate_samples: list[float] = []
    warmup_samples: dict[str, list[float]] = {}  # discarded, kept for the record
    warmups_discarded: int = 0
    n_pairs: int = 0
    baseline_median: float | None = None
    candidate_median: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = 0.95
    p_value: float | None = None
    verdict: PerfVerdict | None = None
    min_effect: float = 0.0
    precise: bool = False  # interval narrower than min_effect when sampling stopped
    alpha: float | None = None  # the per-look level p had to beat (sequential stopping, overall A/A error 5%)
    max_pairs: int = 0
    cv: float | None = None  # measured noise: std of the per-round log ratios (~ coefficient of variation)
    rerun_low: float | None = None  # where another run's ratio is expected (agent.checks.stats.rerun_interval)
    rerun_high: float | None = None
    stop_reason: str | None = None  # "significant after N pairs", "precise after N pairs", "max pairs reached ..."
    seed: int = 0
    device: str = "cpu"
    duration_s: float = 0.0  # sampling only
    processes: str = "fresh processes"  # how the bench samples were started (agent.checks.perf.Bench)
    timer: str | None = None  # how the bench says it timed, e.g. "cuda-events, L2 flushed" (its line's "timer")
    lines: int = 1  # lines of the metric one baseline bench process printed; a process's value is their median
    lock_wait_s: float = 0.0  # waiting for another measurement on the same device
    started_at: float | None = None  # when sampling began, holding the device lock (Unix time): lets a reader
    # check that measurements on one device never overlapped
    error: str | None = None  # the bench failed or did not print the metric
    error_side: str | None = None  # "baseline", "candidate" or "reference"
    outside: OutsideClock | None = None  # the harness's clock on the same processes (None in older reports)
    first_call: FirstCall | None = None  # the gain on the first call alone, where the task asks (checks.firstcall)
    conditions: Conditions | None = None  # the machine while it was sampled (agent.checks.conditions)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        return None if self.ratio is None else speedup(self.ratio, self.direction)

    @property
    def unestablished(self) -> bool:
        """The noise, not the change, left the speed open: "inconclusive", or a gain no clock could tell
        from none (not one a clock ruled out, nor one only repeated calls show)."""
        if self.error is not None:
            return False
        unheard = (self.verdict == PerfVerdict.NOT_CONFIRMED and self.outside is not None and not self.outside.refuted
                   and (self.first_call is None or self.first_call.verdict == PerfVerdict.FASTER))
        return self.verdict == PerfVerdict.INCONCLUSIVE or unheard


class ReferenceResult(BaseModel):
    """The task's expert patch measured in the same interleaved rounds."""

    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    verdict: PerfVerdict | None = None
    samples: list[float] = []
    speedup: float | None = None
    # (candidate speedup - 1) / (reference speedup - 1); only when both are significantly "faster"
    fraction_of_reference: float | None = None
    error: str | None = None


class Environment(BaseModel):
    cpu: str | None = None
    cpu_count: int | None = None
    gpu: str | None = None
    gpu_driver: str | None = None
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    platform: str | None = None
    base_commit: str | None = None
    candidate_commit: str | None = None
    isolation: str | None = None
    limits: str | None = None  # the sandbox's resource caps, in words (agent.env.sandbox.ResourceLimits)
    device: str | None = None
    # Clocks as probed (once per checker): a timing means little without them (boost, throttling, pinning).
    gpu_sm_clock_mhz: int | None = None
    gpu_mem_clock_mhz: int | None = None
    gpu_max_sm_clock_mhz: int | None = None
    gpu_clocks_locked: bool | None = None  # application clocks pinned (nvidia-smi -ac / -lgc)
    cpu_mhz: float | None = None
    cpu_governor: str | None = None  # cpufreq scaling governor ("performance", "powersave", ...)


class Evaluation(BaseModel):
    """Everything one grading of one patch found; `verdict` is the one-word summary."""

    task_id: str = ""
    verdict: Verdict
    reasons: list[str] = []  # why the verdict is not "pass", in words
    quick: bool = False
    hygiene: Hygiene = Hygiene()
    protected_violations: list[str] = []
    integrity: IntegrityResult = IntegrityResult()
    diff_stats: DiffStats = DiffStats()
    setup: CommandRun | None = None
    correctness: Correctness | None = None
    coverage: CoverageResult | None = None
    sanitizer: SanitizerResult | None = None
    initcheck: InitcheckResult | None = None
    read_sites: list[ReadSiteResult] = []
    bench_check: BenchCheck | None = None
    perf: PerfResult | None = None
    reference: ReferenceResult | None = None
    environment: Environment = Environment()
    duration_s: float = 0.0
    error: str | None = None
    # Set by the runner on the evaluation it writes into report.json:
    emitted: str | None = None  # which state was emitted and graded, e.g. "best passing candidate"
    note: str | None = None  # e.g. why there is nothing to grade
    warnings: list[str] = []  # the run's warnings (unsealed sandbox, unpriced model, ...)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        """baseline/candidate for "lower" metrics, candidate/baseline for "higher": >1 is better."""
        return self.perf.speedup if self.perf is not None else None

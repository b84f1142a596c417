"""NVIDIA compute-sanitizer's initcheck around the correctness command: device memory read before
anything wrote it.

Poison fills uninitialised memory with NaN, which *initialises* it, and the dispatch sanitizer only
sees ops from Python; initcheck watches every CUDA kernel and every copy back to the host. It runs
sandboxed and cold (no warm interpreter), not poisoned, with PyTorch's caching allocator off: a
cached block keeps what its last user wrote and would hide the read. Its report comes back through
the command's output, a pipe the harness holds: the candidate's processes can add lines to it but
never remove the tool's, as they could a log file in a folder they can write. The unchanged baseline runs
under it too, once per checker, so reads the base already makes (library kernels, the tests' own
buffers) are told apart from the patch's by (kernel, kind).

Here: finding the tool, the command line, parsing its report (current and older formats), and
the comparison; `run` is the one side effect.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from agent.checks.correctness import POISON_ENV, to_run
from agent.checks.evaluation import CommandRun, DeviceRead, InitcheckResult
from agent.env.sandbox import SandboxSpec, run_command
from agent.util.text import tail

TOOL = "compute-sanitizer"
FALLBACK_DIRS = ("/usr/local/cuda/bin",)
# Printing stops at this many reports (the ERROR SUMMARY still counts all); the limit is global,
# not per kernel, so it is generous. Without backtraces a report is a few lines, so the whole report
# fits in MAX_OUTPUT; a run whose output is cut (a flood) could have lost reports: not measured.
PRINT_LIMIT = 10_000
MAX_OUTPUT = 8 << 20
ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}

_PREFIX = re.compile(r"^=+ ?")
_BANNER = re.compile(r"^=+ ((?:COMPUTE-SANITIZER|CUDA-MEMCHECK)\b.*)$", re.M)
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?\b")
_DEVICE = re.compile(r"^Uninitiali[sz]ed __(\w+)__ memory read(?: of size (\d+))?", re.I)
_HOST = re.compile(r"^Host API (?:memory access error|uninitiali[sz]ed memory access)", re.I)
_OTHER = re.compile(r"^(?:Invalid|Unused|Leaked|Program hit|Error|Warning|Barrier|Race|Saved|Target)\b")
_SIZE = re.compile(r"of size (\d+)")
_BY_API = re.compile(r"on access by (.+?)\.?$")
# PyTorch's copy kernels (`copy_`, `clone`, `.to`, `cat`): they load every element they move, so
# initcheck reports copying a partly written buffer, which the reads after the copy decide about.
_COPY = re.compile(r"direct_copy_kernel|CatArrayBatchedCopy")


@dataclass(frozen=True)
class Findings:
    """What one run under the tool reported; `note` set: nothing was measured, and why."""

    reads: list[DeviceRead] = field(default_factory=list)
    errors: int | None = None
    banner: str | None = None
    note: str | None = None

    @property
    def measured(self) -> bool:
        return self.note is None


def find_tool(path: str | None, cuda_home: str | None = None,
              fallbacks: tuple[str, ...] = FALLBACK_DIRS) -> tuple[Path | None, list[str]]:
    """compute-sanitizer on `path` (the commands' PATH), else in $CUDA_HOME/bin, else in the
    toolkit's usual place; with the places looked, for the note when it is nowhere."""
    looked = ["PATH"]
    found = shutil.which(TOOL, path=path) if path else None
    for folder in [f"{cuda_home}/bin" if cuda_home else None, *fallbacks]:
        if found or folder is None:
            continue
        looked.append(folder)
        found = shutil.which(TOOL, path=folder)
    return (Path(found) if found else None), looked


def command(tool: Path, wrapped: str, print_limit: int = PRINT_LIMIT) -> str:
    """The shell line that runs `wrapped` (the task's command) under initcheck, every child process
    included, the reports on the tool's standard output."""
    return shlex.join([str(tool), "--tool", "initcheck", "--target-processes", "all",
                       "--print-limit", str(print_limit), "--show-backtrace", "no", "bash", "-c", wrapped])


def kernel_name(at: str) -> str:
    """A kernel as reported, in any of the tool's formats, without what varies between builds and
    formats: 'void k<T>(int *)+0x1a0 in f.cu:41', '0x1a0 in k(int *)', '0x70 in /p/f.cu:12:k(int *)'
    and 'k in f.cu:9' all give the kernel alone."""
    s = at.strip()
    s = re.sub(r"^0x[0-9a-fA-F]+ in ", "", s)
    s = re.sub(r"^[^\s()<>]+\.\w+:\d+ in ", "", s)
    s = re.sub(r"^[^\s()<>]+\.\w+:\d+:", "", s)
    s = re.sub(r"\+0x[0-9a-fA-F]+(?: in .*)?$", "", s)
    s = re.sub(r" in [^\s()<>]+:\d+$", "", s)
    s = re.sub(r"^void ", "", s)
    return s.strip() or "(unknown)"


def parse(text: str) -> Findings:
    """The reports in a run's output (among the tests' own lines), grouped by (kernel, kind) with counts. Not
    measured without the tool's banner or its ERROR SUMMARY: the tool never attached, or was killed before the end."""
    banners = _BANNER.findall(text)
    summaries = _SUMMARY.findall(text)
    if not banners or not summaries:
        missing = " and ".join(w for w, seen in (("no COMPUTE-SANITIZER banner", banners),
                                                  ("no ERROR SUMMARY", summaries)) if not seen)
        return Findings(banner=banners[0].strip() if banners else None, note=f"{missing} in its report")
    groups: dict[tuple[str, str], DeviceRead] = {}
    current: tuple[str, int | None] | None = None  # the open report's kind and size, its kernel not yet seen

    def add(kernel: str) -> None:
        nonlocal current
        assert current is not None
        kind, size = current
        key = (kernel_name(kernel), kind)
        if key in groups:
            read = groups[key]
            read.count += 1
            read.size = max(read.size or 0, size or 0) or None
        else:
            groups[key] = DeviceRead(kernel=key[0], kind=kind, size=size)
        current = None

    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        line = _PREFIX.sub("", raw).strip()
        device, host = _DEVICE.match(line), _HOST.match(line)
        if current is not None and (device or host or _OTHER.match(line) or _SUMMARY.search(line)):
            add("(unknown)")  # a report that never named its kernel
        if device:
            current = (f"{device.group(1).lower()} read", int(device.group(2)) if device.group(2) else None)
        elif host:
            size = _SIZE.search(line)
            current = ("host API access", int(size.group(1)) if size else None)
        elif current is not None and (by := _BY_API.search(line)):
            add(by.group(1))
        elif current is not None and line.startswith("at "):
            add(line[3:])
    if current is not None:
        add("(unknown)")
    return Findings(reads=list(groups.values()), errors=sum(map(int, summaries)), banner=banners[0].strip())


def report(output: str, cut_bytes: int = 0) -> Findings:
    """What the tool reported in a run's output; not measured when the output was cut or holds no
    complete report (the tool did not attach, or the run ended first)."""
    if cut_bytes:
        return Findings(note=f"the run printed {cut_bytes:,} bytes more than the {MAX_OUTPUT >> 20} MB kept, "
                             "so reports of the tool could have been cut")
    found = parse(output)
    if found.measured:
        return found
    errors = [ln.strip("= ") for ln in output.splitlines() if ln.startswith("=") and "Error" in ln]
    why = f"{found.note}{'; ' + '; '.join(dict.fromkeys(errors)) if errors else ''}"
    return Findings(banner=found.banner, note=f"{TOOL} did not report ({why}): the tool did not attach, "
                    f"or the run ended first; output: {tail(output, 600)}")


def run(tool: Path, root: Path, wrapped: str, env: dict[str, str], timeout_s: float,
        sandbox: SandboxSpec = SandboxSpec()) -> tuple[CommandRun, Findings]:
    """`wrapped` in `root` under initcheck, sandboxed (as `sandbox` says: the task's); never poisoned
    (poison writes the memory, and initcheck would see it initialised)."""
    env = {k: v for k, v in env.items() if k not in POISON_ENV} | ENV
    res = run_command(command(tool, wrapped), root, sandbox=sandbox, timeout_s=timeout_s, env=env,
                      max_output=MAX_OUTPUT)
    return to_run("initcheck", res), report(res.output, res.cut_bytes)


def version(tool: Path, root: Path, env: dict[str, str], sandbox: SandboxSpec = SandboxSpec()) -> str:
    """'NVIDIA (R) Compute Sanitizer, Version 2024.1.1 (...) at /usr/local/cuda/bin/compute-sanitizer'."""
    res = run_command(f"{shlex.quote(str(tool))} --version", root, sandbox=sandbox, timeout_s=60, env=env)
    lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()] if res.ok else []
    named = list(dict.fromkeys(lines[:1] + [ln for ln in lines if ln.startswith("Version")]))
    return f"{', '.join(named) or TOOL} at {tool}"


def judge(cand: Findings, base: Findings | None, **common) -> InitcheckResult:
    """The candidate's reads, less the kernels that read uninitialised memory on the baseline too
    (`base` None: the candidate reported none, so there was nothing to compare)."""
    if not cand.measured:
        return InitcheckResult(measured=False, note=cand.note, **common)
    if base is not None and not base.measured:
        return InitcheckResult(measured=False, errors=cand.errors,
                               note=f"no baseline to compare with: on the baseline, {base.note}", **common)
    at_base = {(r.kernel, r.kind) for r in base.reads} if base is not None else set()
    new = [r for r in cand.reads if (r.kernel, r.kind) not in at_base]
    return InitcheckResult(reads=[r for r in new if not is_copy(r)], copies=[r for r in new if is_copy(r)],
                           at_base=[r for r in cand.reads if (r.kernel, r.kind) in at_base],
                           errors=cand.errors, **common)


def is_copy(read: DeviceRead) -> bool:
    return read.kind != "host API access" and _COPY.search(read.kernel) is not None


class Initcheck:
    """One checker's initcheck runs: the tool found once; the baseline run once, and only when a
    candidate reports reads (until then there is nothing to tell apart, and the tool is slow)."""

    def __init__(self, wrapped: str, timeout_s: float, log: Callable[[str], None],
                 sandbox: SandboxSpec = SandboxSpec()):
        self.wrapped, self.timeout_s, self.log = wrapped, timeout_s, log
        self.sandbox = sandbox  # the task's (SandboxSpec.for_task)
        self._base: tuple[Findings, float] | None = None
        self._tool: str | None = None

    def check(self, cand: Path, base: Path, env: Callable[[Path], dict[str, str]]) -> InitcheckResult:
        """Candidate workspace `cand` against baseline workspace `base`; `env(root)` is the tests'
        environment in a workspace."""
        cand_env = env(cand)
        tool, looked = find_tool(cand_env.get("PATH"), cand_env.get("CUDA_HOME"))
        if tool is None:
            return InitcheckResult(measured=False, note=f"{TOOL} not found (looked on {', '.join(looked)})")
        if self._tool is None:
            self._tool = version(tool, cand, cand_env, self.sandbox)
        self.log(f"tests under {TOOL} initcheck: {self.wrapped}")
        cand_run, found = run(tool, cand, self.wrapped, cand_env, self.timeout_s, self.sandbox)
        if found.measured and found.reads and self._base is None:
            self.log(f"the baseline under {TOOL} initcheck, to tell the patch's reads from the base's")
            base_run, base_found = run(tool, base, self.wrapped, env(base), self.timeout_s, self.sandbox)
            self._base = (base_found, base_run.duration_s)
        base_found, base_s = self._base if self._base is not None and found.reads else (None, None)
        return judge(found, base_found, run=cand_run, tool=self._tool,
                     baseline_s=round(base_s, 2) if base_s is not None else None)

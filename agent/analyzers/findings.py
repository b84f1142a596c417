"""The data that crosses the analyzers' boundary: findings, rule ids, configuration, and how
findings are shown to people (a rich table) and programs (plain dicts).

Kept free of libcst so that callers (CLI, offline policy, reports) can import it cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from rich.markup import escape
from rich.table import Table

ZERO_INIT = "zero-init-buffer"
PREFIX_ZERO = "buffer-prefix-zero"
HOST_SYNC = "host-device-sync"
PER_STEP_ALLOC = "per-step-alloc"
TENSOR_FROM_LIST = "tensor-from-list"
LOOP_TENSOR = "python-loop-tensor"
PARSE_ERROR = "parse-error"
ANALYZER_ERROR = "analyzer-error"

RULES: dict[str, str] = {
    ZERO_INIT: ("torch.zeros/zeros_like/new_zeros/full(..., 0) buffer that may be fully written before it is read: "
                "torch.empty skips the memset"),
    PREFIX_ZERO: ("a write that relies on a buffer's initial zeros: skips element 0 (buf[1:...]), accumulates "
                  "(+=, add_) or scatters"),
    HOST_SYNC: (".item()/.tolist()/.cpu()/.numpy()/bool()/int()/float() on a tensor in per-step code stalls the host "
                "on the device"),
    PER_STEP_ALLOC: ("torch.arange/tensor/zeros/ones/empty/full or F.pad(torch.cumsum(...)) allocates on every step; "
                     "reuse a preallocated buffer"),
    TENSOR_FROM_LIST: ("torch.tensor(python list, device=...) in per-step code copies from pageable memory "
                       "synchronously"),
    LOOP_TENSOR: "a Python for loop builds a tensor element by element (t[i] = ... or list.append then torch.tensor)",
    PARSE_ERROR: "the file could not be parsed, so no rule ran on it",
    ANALYZER_ERROR: "an analyzer failed on this file (a bug in perfagent); other files are unaffected",
}

DEFAULT_PER_STEP = r"forward|replay|step|decode|extend|metadata"
DEFAULT_SETUP = r"^(__init__|__post_init__|__new__|setup\w*|\w*_state|\w*warmup\w*|load\w*)$"
DEFAULT_ONE_TIME = (r"captur|cuda_graph_state|warm_?up|profile|dummy|_grow|grow_|resize|reserve|realloc"
                    r"|ensure_\w*(capacity|size|buffer)")


@dataclass(frozen=True)
class Finding:
    """One rule hit.

    `line` and `col` are both 1-based (editor convention, `path:line:col`) and point at the
    flagged expression (for zero-init-buffer: the allocating call). `key` is
    `path::function::target` (`<module>` outside functions; `#2`, `#3` on repeats in one
    file) and does not contain line numbers, so it survives unrelated edits: a policy uses
    it to apply or revert one rewrite. `fixable` means a rewrite exists; `safe_to_rewrite`
    means it exists and no static hazard was seen (`hazard` says why not). A static "safe"
    is only a candidate: the poison-memory correctness run decides.
    """

    rule: str
    path: str
    line: int
    col: int
    message: str
    function: str | None
    key: str
    snippet: str
    fixable: bool = False
    safe_to_rewrite: bool = False
    hazard: str | None = None

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True)
class AnalyzerConfig:
    """Knobs that change what counts as per-step code.

    A function is per-step when `per_step_pattern` (case-insensitive, searched) matches its
    name or when a per-step function of the same module calls it (`self.f()` or `f()`),
    unless `one_time_pattern` (case-insensitive, searched) matches it: CUDA-graph capture,
    warm-up, profiling and cache growth run once or rarely even when a per-step function
    calls them (`if n > cap: self._grow(n)`), and what only they call is not per-step either.
    Loop and comprehension bodies are per-step too, except inside functions matching
    `setup_pattern` (one-time setup such as `__init__`) or `one_time_pattern` that no
    per-step function calls.
    """

    per_step_pattern: str = DEFAULT_PER_STEP
    setup_pattern: str = DEFAULT_SETUP
    one_time_pattern: str = DEFAULT_ONE_TIME



def findings_table(findings: Iterable[Finding], title: str | None = None) -> Table:
    findings = list(findings)
    table = Table(title=title or f"{len(findings)} finding(s)", show_lines=False)
    table.add_column("location", overflow="fold", no_wrap=False)
    table.add_column("rule", style="cyan")
    table.add_column("function")
    table.add_column("finding", overflow="fold")
    table.add_column("fix")
    for f in findings:
        text = escape(f.message)
        if f.hazard:
            text += f"\n[yellow]hazard:[/] {escape(f.hazard)}"
        fix = "[green]safe[/]" if f.safe_to_rewrite else "[yellow]hazard[/]" if f.fixable else "-"
        table.add_row(escape(f.location), f.rule, escape(f.function or ""), text, fix)
    return table


def findings_json(findings: Iterable[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]

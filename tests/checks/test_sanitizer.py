"""The uninitialised-read sanitizer: reads of memory nothing wrote are evidence whether or not a test's
assertion sees the garbage. Driven through real processes with our check hook, and through the Checker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.checks import Checker
from agent.checks.correctness import install_hook
from agent.checks.patchinfo import FileLines
from agent.checks.records import new_key
from agent.checks.sanitizer import collect, prepare
from agent.task import load_task
from helpers import CONTRACT, contract_task, key_fd, make_patch, make_repo

pytest.importorskip("torch")


def sanitize(tmp_path: Path, module: str, script: str, kernels: list[str] = (), env: dict | None = None):
    """Run `script` (which imports mod.py, the tracked file) under the hook; the merged result."""
    root = tmp_path / "repo"
    root.mkdir(parents=True)
    (root / "mod.py").write_text(textwrap.dedent(module))
    (root / "run.py").write_text(textwrap.dedent(script))
    hook = install_hook(tmp_path / "hook")
    folder = prepare(tmp_path / "reads", root, ["mod.py"], list(kernels))
    key = new_key()
    with key_fd(key) as fd:
        full = {**os.environ, "PYTHONPATH": f"{hook}:{root}", "PERFAGENT_POISON": "1",
                "PERFAGENT_SANITIZE": str(folder), "PERFAGENT_KEY_FD": str(fd), **(env or {})}
        res = subprocess.run([sys.executable, "run.py"], cwd=root, env=full, capture_output=True, text=True,
                             timeout=120, pass_fds=(fd,))
    assert res.returncode == 0, res.stderr
    lines = sum(1 for _ in (root / "mod.py").read_text().splitlines())
    return collect(folder, root, [FileLines("mod.py", list(range(1, lines + 1)))], key)


def by_line(result) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in result.reads:
        out.setdefault(int(r.buffer.rsplit(":", 1)[1]), []).append(r)
    return out


MODULE = """\
import torch

def alloc(n):
    return {
        "cu": torch.empty(n + 1, dtype=torch.int32),   # line 5: element 0 never written
        "lens": torch.empty(n, dtype=torch.int32),     # line 6: written whole before it is read
        "acc": torch.empty(n),                         # line 7: accumulated into
        "pt": torch.empty(n, 4, dtype=torch.int32),    # line 8: only column 0 written (index_put_)
        "copied": torch.empty(n, dtype=torch.int32),   # line 9: gathered, the copy never used
        "used": torch.empty(n, dtype=torch.int32),     # line 10: gathered, the copy used
        "out": torch.empty(n),                         # line 11: written by an out= op
        "masked": torch.empty(n),                      # line 12: masked_fill_ on half, then read whole
    }

def step(b, lens):
    n = lens.numel()
    b["lens"].copy_(lens)
    b["cu"][1:].copy_(torch.cumsum(lens, 0))
    b["acc"] += 1
    b["pt"][torch.arange(n), 0] = 7
    torch.cumsum(lens.float(), 0, out=b["out"])
    b["masked"].masked_fill_(torch.arange(n) < n // 2, 0.0)
    gathered = b["copied"][torch.zeros(n, dtype=torch.long)]
    used = b["used"][torch.zeros(n, dtype=torch.long)].clone()
    return int(b["cu"].sum()), int(b["lens"].sum()), int(b["pt"][:, 0].sum()), float(b["out"].sum()), \\
        int(used.max()), float(b["masked"].sum())
"""


@pytest.mark.slow
def test_each_read_of_unwritten_elements_is_recorded_with_its_op_and_elements(tmp_path):
    result = sanitize(tmp_path, MODULE, """\
        import os, torch, mod
        os.environ["PERFAGENT_TEST"] = "mode-a"
        b = mod.alloc(4)
        mod.step(b, torch.tensor([1, 2, 3, 4], dtype=torch.int32))
    """)
    assert result.measured and not result.elsewhere
    reads = by_line(result)
    assert set(reads) == {5, 7, 10, 12}, reads  # not lens, pt[:, 0], the unused copy, or the out= buffer
    cu = reads[5][0]
    assert cu.op == "aten.sum.default" and (cu.uninitialised, cu.elements, cu.index) == (1, 5, [0])
    assert cu.tests == ["mode-a"] and cu.at.startswith("mod.py:") and "(step)" in cu.at
    assert cu.code == '"cu": torch.empty(n + 1, dtype=torch.int32),   # line 5: element 0 never written'
    assert reads[7][0].op == "aten.add_.Tensor" and reads[7][0].uninitialised == 4
    used = reads[10][0]  # the copy carries its source's unwritten elements to where it is used
    assert used.op == "aten.max.default" and used.uninitialised == 4
    assert reads[12][0].uninitialised == 2 and reads[12][0].elements == 4


@pytest.mark.slow
def test_what_the_call_that_made_a_buffer_left_written_when_it_returned_is_counted_per_allocation(tmp_path):
    """Counted when the outermost call into the tracked file returns (a helper it calls that allocates does
    not end it), whatever writes the buffer in between (a slice, a fill, nothing), per line and order in the
    call: the helper's second buffer, half written at every size, is apart from its first."""
    result = sanitize(tmp_path, """\
        import torch

        def _buf(n):
            return torch.empty(n, dtype=torch.int32)    # line 4: each init's buffers come from here

        def init(n, small):
            a, b = _buf(n), _buf(n)
            a[: n * small] = 0                          # whole when small, untouched when not
            b[: n // 2].fill_(1)                        # half, at every size
            c = torch.empty(n)                          # line 10: written in full later, by another call
            return a, b, c

        def later(c):
            c.zero_()
    """, """\
        import mod
        kept = [mod.init(8, True), mod.init(8, False)]
        for _, _, c in kept:
            mod.later(c)
    """)
    assert result.by_return == {"mod.py:4#0": [2, 1], "mod.py:4#1": [2, 0], "mod.py:10#0": [2, 0]}, result.by_return


@pytest.mark.slow
def test_data_read_without_an_op_and_pytest_names_the_test(tmp_path):
    """tolist() reads the data without dispatching an op; pytest's PYTEST_CURRENT_TEST names the test."""
    result = sanitize(tmp_path, """\
        import torch
        def alloc():
            return torch.empty(3, dtype=torch.int32)
    """, """\
        import os, mod
        os.environ["PYTEST_CURRENT_TEST"] = "tests/test_x.py::test_lists (call)"
        print(mod.alloc().tolist())
    """)
    (read,) = result.reads
    assert read.op == "Tensor.tolist" and read.tests == ["tests/test_x.py::test_lists"]


@pytest.mark.slow
def test_a_named_kernel_reads_every_tensor_it_is_handed(tmp_path):
    """Opaque kernels (here a Python function that looks at nothing) count every tensor argument as
    read; the same call is not a read when the task does not name it."""
    (tmp_path / "k").mkdir()
    module = """\
        import torch
        import kern

        def run():
            scratch = torch.empty(8)
            kern.launch(scratch, out=torch.zeros(2))
    """
    script = "import sys; sys.path.insert(0, %r); import mod; mod.run()\n" % str(tmp_path / "k")
    (tmp_path / "k" / "kern.py").write_text("def launch(*tensors, out=None):\n    return None\n")
    named = sanitize(tmp_path, module, script, kernels=["kern.launch"])
    (read,) = named.reads
    assert read.op == "kernel kern.launch" and read.argument == "#0" and read.uninitialised == 8
    other = tmp_path / "again"
    other.mkdir()
    (other / "k").mkdir()
    (other / "k" / "kern.py").write_text((tmp_path / "k" / "kern.py").read_text())
    script = script.replace(str(tmp_path / "k"), str(other / "k"))
    assert sanitize(other, module, script).reads == []


@pytest.mark.slow
def test_allocations_outside_the_tracked_files_are_not_watched(tmp_path):
    result = sanitize(tmp_path, "import torch\n", """\
        import torch, mod
        x = torch.empty(4)
        print(float(x.sum()))
    """)
    assert result.measured and result.reads == [] and result.elsewhere == []


def test_no_torch_means_not_measured(tmp_path):
    result = sanitize(tmp_path, "X = 1\n", "import mod\n")
    assert not result.measured and "imported torch" in result.note


EAGER = """\
import torch


def alloc(n):
    return torch.empty(n)  # line 5: never written
"""
COMPILED = EAGER + """

@torch.compile(backend="eager")
def total(t):
    return t.sum() + 1
"""


def test_the_sanitizer_imports_no_compiler_until_the_code_compiles_and_then_still_sees_its_reads(tmp_path):
    """torch wraps a dispatch mode's __torch_dispatch__ so that torch.compile never traces it: 2 s of
    importing torch._dynamo at its first op and a wrapper on every op after. The wrapping waits until the
    process imports torch._dynamo; code that never compiles pays nothing (nor, poisoned, for the compiler
    settings torch.use_deterministic_algorithms imports), and compiled code is watched."""
    eager = sanitize(tmp_path / "eager", EAGER, """\
        import sys
        import mod
        mod.alloc(4).sum()
        assert not {"torch._dynamo", "torch._inductor.config"} & set(sys.modules), "the compiler was imported"
    """)
    assert eager.measured and {r.op for r in eager.reads} == {"aten.sum.default"}, eager
    compiled = sanitize(tmp_path / "compiled", COMPILED, """\
        from torch.utils._python_dispatch import _get_current_dispatch_mode
        import mod
        assert mod.total(mod.alloc(4)).isnan(), "not poisoned under torch.compile"
        mode = type(_get_current_dispatch_mode())
        assert hasattr(mode.__torch_dispatch__, "__wrapped__"), "compiled code may trace the sanitizer"
    """)
    assert compiled.measured and by_line(compiled).keys() == {5}, compiled


# -- through the Checker ---------------------------------------------------------------------------
BACKEND = """\
import torch


class Backend:
    def init_graph_state(self, max_bs):
        self.meta = {
            "lens": torch.zeros(max_bs, dtype=torch.int32),
            "cu": torch.zeros(max_bs + 1, dtype=torch.int32),
        }
        self.out = torch.empty(max_bs)

    def capture(self, bs):
        # warm-up before any replay: the prefix sum is computed from whatever `lens` holds, then thrown away
        self.warm = torch.cumsum(self.meta["lens"][:bs], 0)
        self.out.copy_(self.warm.float())

    def replay(self, lens):
        bs = lens.numel()
        self.meta["lens"][:bs].copy_(lens)
        self.meta["cu"][1 : bs + 1].copy_(torch.cumsum(lens, 0))
        return self.meta["cu"][: bs + 1]
"""
TEST = """\
import torch
from pkg.backend import Backend


def test_replay_gives_prefix_sums():
    b = Backend()
    b.init_graph_state(4)
    b.capture(4)
    assert b.replay(torch.tensor([1, 2, 3], dtype=torch.int32))[1:].tolist() == [1, 3, 6]
"""
LENS = {"pkg/backend.py": ('"lens": torch.zeros(max_bs', '"lens": torch.empty(max_bs')}


def checker_task(tmp_path: Path, extra: str = "", files: dict[str, str] | None = None) -> tuple:
    src = tmp_path / "src"
    make_repo(src, {"pkg/__init__.py": "", "pkg/backend.py": BACKEND, "tests/test_backend.py": TEST, **(files or {})})
    toml = tmp_path / "task.toml"
    toml.write_text(f'id = "graphs"\nrepo = "{src}"\nprompt = "p"\nprotected = ["tests/**"]\n'
                    f'[correctness]\ncommand = "python -m pytest -q -p no:cacheprovider tests"\n{extra}')
    return load_task(toml), src


@pytest.mark.slow
def test_a_read_no_assertion_sees_fails_the_check(tmp_path):
    """Poisoned `lens` reaches no assertion (capture's result is discarded), so the poisoned tests pass;
    the sanitizer's record of the read is what fails the patch."""
    task, src = checker_task(tmp_path)
    patch = make_patch(src, tmp_path, LENS)
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(patch, perf=False)
    assert ev.correctness.plain.passed and ev.correctness.poison.passed
    assert ev.verdict == "fail", ev.reasons
    (read,) = ev.sanitizer.reads
    assert read.buffer == "pkg/backend.py:7" and read.op == "aten.cumsum.default"
    assert read.tests == ["tests/test_backend.py::test_replay_gives_prefix_sums"]
    assert read.at == "pkg/backend.py:14 (capture)"
    assert "read before they are written (sanitizer)" in ev.reasons[0] and "pkg/backend.py:7" in ev.reasons[0]
    assert ev.sanitizer.elsewhere == []  # self.out is uninitialised at base, and written before it is read


@pytest.mark.slow
def test_a_buffer_written_before_every_read_passes_and_the_task_can_turn_it_off(tmp_path):
    task, src = checker_task(tmp_path)
    cu = {"pkg/backend.py": ('"cu": torch.zeros(max_bs + 1', '"cu": torch.empty(max_bs + 1')}
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(make_patch(src, tmp_path, cu), perf=False)
    # cu[0] is never written, but nothing reads cu[0] here: replay returns a view, the test reads [1:]
    assert ev.verdict == "pass" and ev.sanitizer.measured and ev.sanitizer.reads == []
    off, src = checker_task(tmp_path / "off", extra="sanitize = false\n")
    with Checker(off, tmp_path / "off" / "work") as checker:
        ev = checker.evaluate(make_patch(src, tmp_path / "off", LENS), perf=False)
    assert ev.verdict == "pass" and ev.sanitizer is None


BOTH_EMPTY = {"pkg/contract.py": CONTRACT["pkg/contract.py"].replace("torch.zeros", "torch.empty")}


@pytest.mark.slow
def test_a_quick_check_names_every_buffer_read_uninitialised_in_one_run_a_full_check_leaves_the_garbage(tmp_path):
    """The agent's quick check zero-fills a changed line's buffer once the sanitizer records its read, so the
    run goes on as the base's would and the second buffer's read is seen too: one check names both (the
    rules policy's search on SGLang took 6 checks, one per such layer, and takes 3). The graded full
    check never does: its poisoned tests meet the garbage and fail."""
    task, src = contract_task(tmp_path)
    patch = make_patch(src, tmp_path, BOTH_EMPTY)
    with Checker(task, tmp_path / "work") as checker:
        quick = checker.evaluate(patch, quick=True, perf=False)
        full = checker.evaluate(patch, perf=False)
    assert sorted({r.buffer for r in quick.sanitizer.reads}) == ["pkg/contract.py:6", "pkg/contract.py:7"]
    assert quick.verdict == "fail" and quick.correctness.poison.passed, quick.reasons
    assert [r.buffer for r in full.sanitizer.reads] == ["pkg/contract.py:6"]
    assert full.verdict == "fail" and not full.correctness.poison.passed, full.reasons


def test_sanitize_needs_the_poisoned_run(tmp_path):
    toml = tmp_path / "task.toml"
    toml.write_text('id = "t"\nrepo = "."\nprompt = "p"\n[correctness]\ncommand = "true"\npoison = false\n'
                    'sanitize = true\n')
    with pytest.raises(Exception, match="sanitize = true needs poison = true"):
        load_task(toml)


# -- red team: the candidate's code runs in the process the sanitizer watches ---------------------------
WIPE = '''import atexit, glob, os

_records = os.environ.get("PERFAGENT_SANITIZE")
if _records:  # leave no record of what this process read
    atexit.register(lambda: [os.remove(f) for f in glob.glob(os.path.join(_records, "reads.*"))])
'''
UNSTACK = '''from torch.utils._python_dispatch import _pop_mode

try:  # step out of every dispatch mode, the sanitizer's included
    while True:
        _pop_mode()
except Exception:
    pass
'''


@pytest.mark.slow
@pytest.mark.parametrize("attack", [WIPE, UNSTACK], ids=["wipe-records", "pop-dispatch-mode"])
def test_a_candidate_that_hides_its_reads_from_the_sanitizer_does_not_pass(tmp_path, attack):
    """The patch makes `lens` uninitialised (read at capture, seen by no assertion) and hides the read:
    it deletes the sanitizer's records at exit, or pops the dispatch mode before any op runs. Without
    the guards both graded `pass`; now the code is flagged and a sanitizer that saw nothing proves nothing."""
    task, src = checker_task(tmp_path)
    old, new = LENS["pkg/backend.py"]
    hostile = BACKEND.replace("import torch\n", "import torch\n" + attack, 1).replace(old, new)
    patch = make_patch(src, tmp_path, {"pkg/backend.py": hostile})
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(patch, perf=False)
    assert ev.correctness.poison.passed and ev.sanitizer.reads == []  # the attack itself works
    assert ev.verdict != "pass", ev.reasons
    assert ev.integrity.flags, ev.reasons


# -- the bench, run once under the same instruments: code that behaves differently at its sizes ---------
BENCH = """\
import json
import time

from pkg.backend import Backend

b = Backend()
t = time.perf_counter()
b.init_graph_state(160)
b.capture(160)
print(json.dumps({"metric": "init_ms", "value": (time.perf_counter() - t) * 1000, "unit": "ms"}))
"""
WITH_BENCH = dict(extra='[perf]\ncommand = "python bench/bench.py"\nmetric = "init_ms"\n',
                  files={"bench/bench.py": BENCH})


def gated(buffer: str, size: str) -> dict:
    """`buffer` uninitialised only at batch sizes the tests never use (the bench's 160)."""
    return {"pkg/backend.py": (f'"{buffer}": torch.zeros({size}', f'"{buffer}": (torch.empty if max_bs > 64 else '
                                                                   f'torch.zeros)({size}')}


@pytest.mark.slow
def test_a_buffer_uninitialised_only_at_the_benchs_sizes_meets_the_sanitizer_there(tmp_path):
    """The tests build the state for 4 requests (zeros, so plain, poisoned and the sanitizer all pass);
    the bench builds it for 160 (empty) and its capture reads `lens` before any replay wrote it. On
    main the change passed; run once under the instruments, the bench shows the read."""
    task, src = checker_task(tmp_path, **WITH_BENCH)
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(make_patch(src, tmp_path, gated("lens", "max_bs")), perf=False)
    assert ev.correctness.poison.passed and ev.sanitizer.measured and ev.sanitizer.reads == []
    assert ev.verdict == "fail", ev.reasons
    (read,) = ev.bench_check.sanitizer.reads
    assert read.buffer == "pkg/backend.py:7" and read.op == "aten.cumsum.default"
    assert "bench run under the sanitizer" in ev.reasons[0]


@pytest.mark.slow
def test_a_buffer_uninitialised_only_in_the_bench_and_never_read_is_unverified(tmp_path):
    """`cu` is allocated uninitialised only at the bench's size, and nothing there reads it: no read to
    fail on, but no test ever ran the line uninitialised, so nothing shows its values do not matter."""
    task, src = checker_task(tmp_path, **WITH_BENCH)
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(make_patch(src, tmp_path, gated("cu", "max_bs + 1")), perf=False)
    assert ev.bench_check.run.passed and ev.bench_check.sanitizer.reads == []
    assert ev.bench_check.only_here == ["pkg/backend.py:8"] and ev.bench_check.ran == ["pkg/backend.py:8"]
    assert ev.verdict == "unverified" and any("only in the bench run" in r for r in ev.reasons), ev.reasons


# Both attacks are spelled so that no name or string of the sanitizer's appears in the patch.
POP_STACK = """import torch as _t
_pop = getattr(_t._C, "_pop_torch_" + "dis" + "patch_stack")
try:
    while True:
        _pop(None)
except Exception:
    pass
"""
BLIND = """import torch as _t
from torch.utils import _python_dispatch as _pd
for _m in getattr(_pd, "_get_current_" + "dis" + "patch_mode_stack")():
    for _v in list(vars(_m).values()):
        for _name in [n for n in dir(type(_v)) if n.startswith("check")]:
            setattr(type(_v), _name, lambda *a, **k: None)
"""


@pytest.mark.slow
@pytest.mark.parametrize("attack", [POP_STACK, BLIND], ids=["pop-the-stack", "blind-its-checks"])
def test_a_sanitizer_taken_off_the_stack_or_blinded_measured_nothing(tmp_path, attack):
    """The patch reads `lens` unwritten, then takes the sanitizer off torch's dispatch stack, or replaces
    its checks through the mode it finds there. Its records then show nothing read; its closing record
    (still on the stack? its canary caught?) says the result cannot be trusted."""
    task, src = checker_task(tmp_path)
    old, new = LENS["pkg/backend.py"]
    hostile = BACKEND.replace("import torch\n", "import torch\n" + attack, 1).replace(old, new)
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(make_patch(src, tmp_path, {"pkg/backend.py": hostile}), perf=False)
    assert ev.correctness.poison.passed, ev.correctness.poison.output_tail
    assert not ev.sanitizer.measured and ev.sanitizer.tampered and ev.sanitizer.reads == []
    assert ev.verdict == "unverified", ev.reasons
    assert any("dispatch stack" in r or "canary" in r for r in ev.reasons), ev.reasons


BROKEN_CONTEXT = """\
import io, json, torch
from agent.checks import sanitize_hook

def device_assert_fired():  # what every CUDA call answers in a process where one has
    raise torch.AcceleratorError("CUDA error: device-side assert triggered")

torch.cuda.is_available, torch.cuda.is_current_stream_capturing = (lambda: True), device_assert_fired
out = io.StringIO()
sanitizer = sanitize_hook._Sanitizer(torch, frozenset(), sanitize_hook._Rows(out, lambda row: row))
sanitizer.install([], lambda module, then: None)
written = torch.ones(3)
sanitizer._new_shadow(written, "mod.py:1", initialised=True)
print("sum", float(written.sum()))
sanitizer.close()
print(out.getvalue().splitlines()[-1])
"""


def test_a_process_whose_cuda_context_a_device_assert_broke_still_closes_with_its_canary_seen():
    """On an H200 the all-empty patch's garbage indices fired a device-side assert; from then on
    `torch.cuda.is_current_stream_capturing` raised in every op the mode saw, so the CPU canary at exit
    went unseen and an honest broken change read as a blinded sanitizer. A CPU machine cannot break a
    CUDA context, so torch's capture probe is made to raise here as it does there."""
    res = subprocess.run([sys.executable, "-c", BROKEN_CONTEXT], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[2])
    assert res.returncode == 0, res.stderr
    assert "sum 3.0" in res.stdout  # the sanitizer does not make a CPU op fail
    summary = json.loads(res.stdout.splitlines()[-1].removeprefix("#closed "))
    assert summary["on_stack"] and summary["canary"], summary


# -- index forms and permutations: the shadow follows aten's semantics ------------------------------------
SHADOWED = """\
import torch

def alloc(*shape):
    return torch.empty(*shape)  # line 4: the tracked buffer
"""
# Every index form a subscript can take: x[FORM] (a read through aten.index, or a view) and x[FORM] = 1
# (aten.index_put_); `idx`, `jdx` integer tensors, `rows`, `last`, `full` boolean ones.
READ_FORMS = ["[:, :, idx]", "[:, idx]", "[..., idx]", "[idx]", "[idx, :, jdx]", "[:, idx, jdx]", "[None, idx]",
              "[:, None, idx]", "[full]", "[:, rows]", "[..., last]", "[idx.view(3, 1)]", "[1, :, idx]",
              "[1:, ..., idx]", "[:, 1:3]", "[..., None]", "[torch.tensor(1)]", "[[0, 1], :, [1, 2]]",
              "[:, rows, idx[:2]]", "[idx, None, ..., jdx]"]
WRITE_FORMS = ["[:, :, idx]", "[:, idx]", "[..., idx]", "[idx, :, jdx]", "[full]", "[:, rows]", "[None, idx]",
               "[1, ..., last]"]
# Ops that move elements without using them: the copy's shadow is the same op run on the source's.
MOVED = ["x.roll(1, 0)", "torch.roll(x, (1, -1), (1, 2))", "x.roll(2)", "x.flip(2)", "x.fliplr()",
         "torch.rot90(x, 1, (1, 2))", "x.permute(2, 0, 1).contiguous()", "torch.permute_copy(x, (1, 2, 0))",
         "x.transpose(0, 2).clone()", "torch.gather(x, 2, gidx)", "torch.take(x, idx)", "x.repeat(1, 2, 1)",
         "torch.take_along_dim(x, gidx, 2)", "x.index_select(2, jdx)"]
SHADOW_SCRIPT = """\
import json, os, torch, mod
g = torch.Generator().manual_seed(7)
written = torch.rand(3, 3, 4, generator=g) > 0.5
idx, jdx = torch.tensor([2, 0, 2]), torch.tensor([1, 3, 0])
gidx = torch.randint(0, 4, (3, 3, 5), generator=g)
full, rows, last = torch.rand(3, 3, 4, generator=g) > 0.4, torch.tensor([True, False, True]), \\
    torch.tensor([False, True, True, False])
expected = []

def read_each(name, y, unwritten):
    # one read per element, each under a test name of its own: the rows spell out the whole shadow
    assert y.shape == unwritten.shape, (name, y.shape, unwritten.shape)
    flat = y.reshape(-1)
    for i in range(flat.numel()):
        os.environ["PERFAGENT_TEST"] = "%s#%d" % (name, i)
        flat[i].sum()
    expected.extend("%s#%d" % (name, i) for i in unwritten.reshape(-1).nonzero().flatten().tolist())

for form in FORMS:
    x = mod.alloc(3, 3, 4)
    x.masked_fill_(written, 1.0)
    read_each("read " + form, eval("x" + form), eval("(~written)" + form))
for form in WRITES:
    x = mod.alloc(3, 3, 4)
    exec("x%s = 1.0" % form)
    unwritten = torch.ones(3, 3, 4, dtype=torch.bool)
    exec("unwritten%s = False" % form)
    read_each("write " + form, x, unwritten)
for op in MOVED:
    x = mod.alloc(3, 3, 4)
    x.masked_fill_(written, 1.0)
    y = eval(op)
    x = ~written
    read_each("move " + op, y, eval(op))
json.dump(expected, open("expected.json", "w"))
"""


@pytest.mark.slow
def test_the_shadow_of_every_index_form_and_permutation_is_real_indexing_on_the_written_elements(tmp_path):
    """x[:, :, idx] is aten.index(x, [None, None, idx]): `None` there is a whole dimension, which the old
    hook rebuilt as a Python subscript (a new axis) and crashed on, or, where the shapes happened to fit,
    gave the copy a wrong shadow. roll, flip and the other permutations counted as a use of every element.
    Now each form's shadow, read element by element, is the real indexing of the written-elements mask."""
    script = (f"FORMS, WRITES, MOVED = {READ_FORMS!r}, {WRITE_FORMS!r}, {MOVED!r}\n"
              + textwrap.dedent(SHADOW_SCRIPT))
    result = sanitize(tmp_path, SHADOWED, script)
    assert result.measured and not result.elsewhere, result
    expected = set(json.loads((tmp_path / "repo" / "expected.json").read_text()))
    seen = {t for r in result.reads for t in r.tests}
    assert {r.op for r in result.reads} == {"aten.sum.default"}, {r.op for r in result.reads}
    for form in [f"read {f}" for f in READ_FORMS] + [f"write {f}" for f in WRITE_FORMS] + [f"move {m}" for m in MOVED]:
        want = {t for t in expected if t.rsplit("#", 1)[0] == form}
        got = {t for t in seen if t.rsplit("#", 1)[0] == form}
        assert got == want, (form, sorted(got - want)[:5], sorted(want - got)[:5])
    assert len(expected) > 300  # the forms do leave unwritten elements to find


@pytest.mark.slow
def test_a_buffer_rolled_then_overwritten_before_any_use_is_not_read(tmp_path):
    """A recurrent-state cache's update: the state is rolled one step and the new column written. Rolling
    moves elements, it uses none: only reading the rolled copy's unwritten elements is a read."""
    result = sanitize(tmp_path, """\
        import torch

        def step(new):
            state = torch.empty(2, 4)             # line 4: never written whole
            rolled = state.roll(-1, -1)
            rolled[:, -1] = new
            fresh = torch.flip(torch.empty(2, 4), (1,))  # line 7: flipped, then overwritten
            fresh.copy_(new.unsqueeze(1).expand(2, 4))
            return rolled[:, -1].sum() + fresh.sum() + rolled[:, 0].sum()
    """, "import torch, mod\nmod.step(torch.ones(2))\n")
    (read,) = result.reads
    assert read.buffer == "mod.py:4" and read.op == "aten.sum.default" and read.uninitialised == 2, read


HOST = """\
import ctypes
import numpy as np
import torch

def numpy_table(n):
    return torch.from_numpy(np.empty((n, 4), dtype=np.int32))           # line 6: never written

def numpy_half(n):
    a = np.empty((n, 4), dtype=np.float32)                               # line 9: half written by numpy
    a[:, :2] = 0
    return torch.as_tensor(a)

def numpy_written(n):
    a = np.empty(n, dtype=np.float64)                                    # line 14: all written by numpy
    a.fill(float("nan"))
    return torch.tensor(a)

def storage(n):
    return torch.tensor([], dtype=torch.int32).set_(torch.UntypedStorage(4 * n))   # line 19: never written

def grown(n):
    t = torch.zeros(2, dtype=torch.int32)
    t.resize_(n)                                                         # line 23: grown, the new part unwritten
    return t

def from_buffer(n):
    return torch.frombuffer(np.empty(n, dtype=np.int32), dtype=torch.int32)     # line 27: never written

def foreign(n):
    raw = (ctypes.c_int32 * n)()
    view = (ctypes.c_int32 * n).from_address(ctypes.addressof(raw))
    return torch.frombuffer(view, dtype=torch.int32), raw                # line 32: not watched

def zeroed(n):
    return torch.frombuffer(bytearray(4 * n), dtype=torch.int32)         # bytearray: always written
"""


@pytest.mark.slow
def test_memory_from_numpy_a_raw_storage_or_growth_is_watched_and_a_foreign_one_named(tmp_path):
    """Memory that reaches a tensor without aten's allocators, at a small size (heap) and at one glibc maps
    fresh (zero pages): numpy's empty arrays (what numpy itself wrote counts as written), a raw
    UntypedStorage, resize_ growth. Memory nothing watches (ctypes over an address) is named instead."""
    result = sanitize(tmp_path, HOST, """\
        import mod
        for n in (3, 12 << 20):
            int(mod.numpy_table(n).sum())
            float(mod.numpy_half(n)[:, :2].sum())
            float(mod.numpy_half(n).sum())
            float(mod.numpy_written(n).sum())
            int(mod.storage(n).sum())
            int(mod.grown(n)[:2].sum())
            int(mod.grown(n).sum())
            int(mod.from_buffer(n).sum())
            mod.foreign(4)
            int(mod.zeroed(n).sum())
    """)
    assert result.measured, result.note
    reads = by_line(result)
    assert sorted(reads) == [6, 9, 19, 23, 27], reads
    assert {r.uninitialised for r in reads[9]} == {6}  # half of n=3 rows' four columns: the first size's read
    assert {r.uninitialised for r in reads[23]} == {1}  # 3 elements, 2 of them written before the growth
    assert {"mod.py:6", "mod.py:9", "mod.py:14", "mod.py:19", "mod.py:23", "mod.py:27"} <= set(result.allocated)
    assert result.unwatched == ["mod.py:32: torch.frombuffer of ctypes memory (mod.c_int_Array_4)"], result.unwatched


@pytest.mark.slow
def test_poison_fills_numpy_arrays_and_raw_storages_at_any_size(tmp_path):
    """Without the sanitizer: what the poisoned tests see in numpy.empty's arrays and a raw storage, at
    a size whose pages come fresh from the kernel (zeros, unpoisoned)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "run.py").write_text(textwrap.dedent("""\
        import numpy as np, torch
        n = 12 << 20
        print(int(np.empty(n, dtype=np.int32)[-1]), bool(np.isnan(np.empty_like(np.ones(n))[-1])),
              int(torch.tensor([], dtype=torch.int32).set_(torch.UntypedStorage(4 * n))[-1]))
    """))
    hook = install_hook(tmp_path / "hook")
    env = {**os.environ, "PYTHONPATH": f"{hook}:{root}", "PERFAGENT_POISON": "1"}
    res = subprocess.run([sys.executable, "run.py"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(2**31 - 1), "True", "-1"], res.stdout

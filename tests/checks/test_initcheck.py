"""compute-sanitizer's initcheck as a correctness mode: its report parsed in the tool's current and older
formats, the command line, finding the tool, the baseline comparison, and the whole path through
`perfagent check --initcheck` with the CPU emulator (tests/gpu/fake-compute-sanitizer) first on PATH."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.checks.evaluation import CommandRun, DeviceRead, Evaluation, InitcheckResult
from agent.checks.initcheck import MAX_OUTPUT, Findings, command, find_tool, judge, kernel_name, parse, report, run
from agent.checks.render import evaluation_rows, summarize
from agent.env.sandbox import base_env
from agent.task import TaskError, load_task
from helpers import all_empty, make_repo

REPO = Path(__file__).resolve().parents[2]
EMULATOR = REPO / "tests" / "gpu" / "fake-compute-sanitizer"
TARGET = REPO / "target_repo"

# compute-sanitizer 2022 and later: "kernel+offset", file:line only with -lineinfo; a host copy of
# device memory nothing wrote; a report the print limit cut short of its kernel line.
CURRENT = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void at::native::index_elementwise_kernel<128, 4, void (int)>(long, T3)+0x1a0
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f3c7ec000fc
=========
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void at::native::index_elementwise_kernel<128, 4, void (int)>(long, T3)+0x1c8
=========     by thread (1,0,0) in block (0,0,0)
=========
========= Uninitialized __global__ memory read of size 8 bytes
=========     at vectorAdd(int *)+0x70 in /home/cuda/samples/memset_error.cu:41
=========     by thread (31,0,0) in block (1,0,0)
=========
========= Host API memory access error at host access to 0x1303fd1400 of size 25600 bytes
=========     Uninitialized access at 0x1303fd4600 on access by cudaMemcpy source.
=========     Saved host backtrace up to driver entry point at error
=========     Host Frame: [0x29200c] in libcuda.so.1
=========
========= ERROR SUMMARY: 12 errors
"""

# CUDA-MEMCHECK and early compute-sanitizer: "offset in kernel", "offset in file:line:kernel", no "bytes".
OLDER = """\
========= CUDA-MEMCHECK
========= Uninitialized __global__ memory read of size 4
=========     at 0x00000020 in test(int*, int*)
=========     by thread (0,0,0) in block (0,0,0)
=========
========= Uninitialized __global__ memory read of size 4
=========     at 0x00000070 in /path/file.cu:12:kernel(int *)
=========
========= Uninitialized __global__ memory read of size 4
=========     at 0x000001a0 in void cub::RadixSortScanBinsKernel<int>(int*, int)
=========
========= ERROR SUMMARY: 3 errors
"""


def test_current_format_groups_reports_by_kernel_and_kind():
    found = parse(CURRENT)
    assert found.measured and found.errors == 12 and found.banner == "COMPUTE-SANITIZER"
    assert found.reads == [
        DeviceRead(kernel="at::native::index_elementwise_kernel<128, 4, void (int)>(long, T3)", kind="global read",
                   size=4, count=2),
        DeviceRead(kernel="vectorAdd(int *)", kind="global read", size=8),
        DeviceRead(kernel="cudaMemcpy source", kind="host API access", size=25600),
    ]


def test_older_format_gives_the_same_names():
    found = parse(OLDER)
    assert found.measured and found.errors == 3 and found.banner == "CUDA-MEMCHECK"
    assert [(r.kernel, r.size) for r in found.reads] == [
        ("test(int*, int*)", 4), ("kernel(int *)", 4), ("cub::RadixSortScanBinsKernel<int>(int*, int)", 4)]
    # the same kernel in the current format normalises to the same key, so a baseline taken with
    # one version still matches
    current = "void cub::RadixSortScanBinsKernel<int>(int*, int)+0x1a0 in /src/radix.cuh:88"
    assert kernel_name(current) == found.reads[2].kernel


@pytest.mark.parametrize("at, kernel", [
    ("k(float *)+0x88", "k(float *)"),
    ("0x88 in k(float *)", "k(float *)"),
    ("0x250 in myapp.cu:41:vector_add(int*)", "vector_add(int*)"),
    ("vector_add in /input/kernel.cu:9", "vector_add"),
    ("stencil.cu:27 in update(float const*, float*)", "update(float const*, float*)"),
    ("at::native::(anonymous namespace)::fill_kernel(at::TensorIterator &)+0x10",
     "at::native::(anonymous namespace)::fill_kernel(at::TensorIterator &)"),
])
def test_kernel_names_lose_offsets_and_places(at, kernel):
    assert kernel_name(at) == kernel


def test_a_report_without_its_kernel_line_still_counts():
    text = ("========= COMPUTE-SANITIZER\n========= Uninitialized __global__ memory read of size 4 bytes\n"
            "========= ERROR SUMMARY: 1 error\n")
    assert parse(text).reads == [DeviceRead(kernel="(unknown)", kind="global read", size=4)]


def test_summaries_of_several_reports_add_up():
    """A summary the candidate prints beside the tool's adds nothing, and hides nothing."""
    found = report(CURRENT + OLDER)
    assert found.errors == 15 and len(found.reads) == 6
    assert report(CURRENT + "========= ERROR SUMMARY: 0 errors\n").errors == 12


@pytest.mark.parametrize("text, missing", [
    ("========= COMPUTE-SANITIZER\n========= Uninitialized __global__ memory read of size 4 bytes\n",
     "no ERROR SUMMARY"),
    ("ERROR SUMMARY: 0 errors\n", "no COMPUTE-SANITIZER banner"),
    ("", "no COMPUTE-SANITIZER banner and no ERROR SUMMARY"),
])
def test_no_banner_or_no_summary_is_not_measured(text, missing):
    """Killed before the end (timeout), or never attached: no claim either way."""
    found = report(text + "\nTraceback: the last words")
    assert not found.measured and found.reads == []
    assert missing in found.note and "did not attach" in found.note and "the last words" in found.note


def test_the_report_is_read_among_the_tests_output():
    found = report("test output\n===== 3 passed in 0.1s =====\n" + OLDER)
    assert found.measured and found.errors == 3


def test_a_cut_output_is_not_measured():
    """Reports lost to a flood of output (the candidate's, say) must not read as none."""
    found = report(CURRENT, cut_bytes=123)
    assert not found.measured and found.reads == [] and "123 bytes more than the 8 MB kept" in found.note
    assert MAX_OUTPUT == 8 << 20


def test_command_wraps_the_task_command_in_bash():
    line = command(Path("/opt/cuda/bin/compute-sanitizer"), "python -m pytest -q -k 'a and b'", 50)
    argv = shlex.split(line)
    assert argv[0] == "/opt/cuda/bin/compute-sanitizer"
    flags = dict(zip(argv[1:-3:2], argv[2:-3:2]))
    assert flags == {"--tool": "initcheck", "--target-processes": "all", "--print-limit": "50",
                     "--show-backtrace": "no"}  # no --log-file: the report comes back on the harness's pipe
    assert argv[-3:] == ["bash", "-c", "python -m pytest -q -k 'a and b'"]


FAKE_TOOL = """#!/bin/sh
while [ "$1" != bash ]; do shift; done
"$@"
printf "========= COMPUTE-SANITIZER\\\\n========= ERROR SUMMARY: 0 errors\\\\n"
"""


def test_run_is_sandboxed_unpoisoned_and_without_the_caching_allocator(tmp_path):
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.write_text(FAKE_TOOL)
    tool.chmod(0o755)
    (tmp_path / "repo").mkdir()
    env = base_env({"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PERFAGENT_POISON": "1"})
    wrapped = 'echo "caching=$PYTORCH_NO_CUDA_MEMORY_CACHING poison=${PERFAGENT_POISON:-off}" > seen.txt'
    run_, found = run(tool, tmp_path / "repo", wrapped, env, timeout_s=60)
    assert run_.passed and run_.name == "initcheck", run_.output_tail
    assert (tmp_path / "repo" / "seen.txt").read_text() == "caching=1 poison=off\n"
    assert found.measured and found.errors == 0 and found.reads == []


def test_find_tool_looks_on_path_then_cuda_home_then_the_toolkit(tmp_path):
    for folder in ("on-path", "cuda/bin", "toolkit"):
        (tmp_path / folder).mkdir(parents=True)
        tool = tmp_path / folder / "compute-sanitizer"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    assert find_tool(str(tmp_path / "on-path"), str(tmp_path / "cuda"))[0] == tmp_path / "on-path/compute-sanitizer"
    assert find_tool("/nowhere", str(tmp_path / "cuda"))[0] == tmp_path / "cuda/bin/compute-sanitizer"
    assert find_tool("/nowhere", None, (str(tmp_path / "toolkit"),))[0] == tmp_path / "toolkit/compute-sanitizer"
    assert find_tool("/nowhere", "/no-cuda", ("/no-toolkit",)) == (None, ["PATH", "/no-cuda/bin", "/no-toolkit"])


def test_reads_the_baseline_makes_too_are_not_the_patchs():
    run = CommandRun(name="initcheck", command="c", exit_code=0, passed=True, duration_s=1.0)
    mine, theirs = DeviceRead(kernel="mine", kind="global read"), DeviceRead(kernel="lib", kind="global read", count=7)
    base = Findings(reads=[DeviceRead(kernel="lib", kind="global read"),
                           DeviceRead(kernel="mine", kind="host API access")], errors=2)
    result = judge(Findings(reads=[mine, theirs], errors=9), base, run=run, tool="t", baseline_s=2.0)
    assert result.measured and result.reads == [mine] and result.at_base == [theirs] and result.errors == 9
    unmeasured = judge(Findings(reads=[mine], errors=1), Findings(note="killed"), run=run, tool="t", baseline_s=2.0)
    assert not unmeasured.measured and "on the baseline, killed" in unmeasured.note


def test_copy_kernels_are_listed_apart_and_do_not_fail():
    """As seen on an H100 for the reference patch: PyTorch's copy kernel moving a partly written buffer."""
    copy = DeviceRead(kernel="at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
                             "at::TensorIteratorBase &)::[lambda() (instance 3)]>(int, T1, T2)", kind="global read",
                      count=2646)
    gather = DeviceRead(kernel="at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, "
                               "long, long, long, bool)", kind="global read", count=64)
    result = judge(Findings(reads=[copy, gather], errors=2710), Findings(reads=[], errors=0))
    assert result.reads == [gather] and result.copies == [copy]
    only_copies = judge(Findings(reads=[copy], errors=2646), Findings(reads=[], errors=0))
    assert only_copies.reads == [] and only_copies.copies == [copy]
    row = next(r for r in evaluation_rows(Evaluation(verdict="pass", initcheck=only_copies)) if r.name == "initcheck")
    assert row.level == "ok" and row.text.startswith("no uninitialised device reads; copied along, not used: at::")


def test_the_check_table_and_the_summary_say_what_initcheck_found():
    ev = Evaluation(verdict="fail", initcheck=InitcheckResult(
        reads=[DeviceRead(kernel="k" * 300, kind="global read", count=3),
               DeviceRead(kernel="cudaMemcpy source", kind="host API access")],
        at_base=[DeviceRead(kernel="lib", kind="global read")]))
    row = next(r for r in evaluation_rows(ev) if r.name == "initcheck")
    assert row.level == "bad" and row.text.startswith("2 kernels read uninitialised device memory: kkk")
    assert "... (3), host API access by cudaMemcpy source (1) (1 already at base)" in row.text
    assert "initcheck: 2 kernels" in summarize(ev)
    lib = DeviceRead(kernel="lib", kind="global read")
    clean = Evaluation(verdict="pass", initcheck=InitcheckResult(at_base=[lib]))
    assert next(r for r in evaluation_rows(clean) if r.name == "initcheck").text == \
        "no uninitialised device reads (1 already at base)"
    off = Evaluation(verdict="pass", initcheck=InitcheckResult(measured=False, note="compute-sanitizer not found"))
    row = next(r for r in evaluation_rows(off) if r.name == "initcheck")
    assert row.level == "warn" and row.text == "not measured: compute-sanitizer not found"


def test_task_flag_is_off_by_default_and_typed(tmp_path):
    def task(extra: str) -> Path:
        f = tmp_path / "t.toml"
        f.write_text(f'id = "t"\nrepo = "."\nprompt = "p"\n[correctness]\ncommand = "true"\n{extra}')
        return f

    assert load_task(task("")).spec.correctness.initcheck is False
    assert load_task(task("initcheck = true\npoison = false\n")).spec.correctness.initcheck
    with pytest.raises(TaskError, match="correctness.initcheck"):
        load_task(task('initcheck = "yes please"\n'))


def emulate(tmp_path: Path, *args: str, tmp: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"TMPDIR": str(tmp)} if tmp else {})}
    return subprocess.run([str(EMULATOR / "compute-sanitizer"), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=env)


def test_the_emulator_refuses_flags_it_does_not_know(tmp_path):
    res = emulate(tmp_path, "--tool", "memcheck", "true")
    assert res.returncode == 1 and "only --tool initcheck" in res.stderr
    res = emulate(tmp_path, "--tool", "initcheck", "--leak-check", "full", "true")
    assert res.returncode == 1 and "--leak-check" in res.stderr


def test_the_emulator_without_torch_measures_nothing_and_keeps_the_exit_code(tmp_path):
    """A command that never starts the sanitizer is 'not measured', as when the real tool cannot attach."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    res = emulate(tmp_path, *shlex.split(command(EMULATOR / "compute-sanitizer", "exit 3"))[1:], tmp=scratch)
    assert res.returncode == 3, res.stderr
    found = report(res.stdout)
    assert not found.measured and "no ERROR SUMMARY" in found.note and "nothing was checked" in found.note
    assert list(scratch.iterdir()) == []  # its scratch folder is gone


# -- the whole path: perfagent check --initcheck -------------------------------------------------------
# The graph tests of decode mode read every buffer of that mode; the command ignores their verdict:
# initcheck is evidence that does not depend on the tests' assertions, and on a CPU the garbage of
# torch.empty fails them at random (the poisoned run, which would fail them every time, is off).
TASK = f"""\
id = "cuda-graph-buffers-initcheck"
repo = "{TARGET}"
prompt = "Avoid zero-filling the CUDA-graph metadata buffers."
protected = ["tests/**", "bench/**"]

[correctness]
command = "python -m pytest -q -p no:cacheprovider tests -k 'graph_replay and decode' || true"
poison = false
initcheck = true
"""


def check(tmp_path: Path, patch: Path, path: str, command: str | None = None) -> dict:
    task = TASK if command is None else TASK.replace(
        '''command = "python -m pytest -q -p no:cacheprovider tests -k 'graph_replay and decode' || true"''',
        f"command = {json.dumps(command)}")
    (tmp_path / "task.toml").write_text(task)
    out = tmp_path / "evaluation.json"
    env = {"PATH": path, "HOME": str(tmp_path), "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "check", str(tmp_path / "task.toml"), "--patch",
                          str(patch), "--initcheck", "--no-perf", "--json", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(out.read_text())


EMULATED = f"{EMULATOR}:{Path(sys.executable).parent}:/usr/bin:/bin"
# The honest path, the all-empty change failing on its device reads and the reference reading nothing uninitialised,
# is graded by `.ci/gpu --dry-run` (its all_empty and reference steps, the same checks with the emulator first on
# PATH): tests/gpu/test_ci_gpu.py holds those evaluations to it.


@pytest.mark.slow
@pytest.mark.skipif(any(shutil.which("compute-sanitizer", path=p) for p in ("/usr/local/cuda/bin", "/usr/bin", "/bin")),
                    reason="a real compute-sanitizer is installed where perfagent looks")
def test_without_the_tool_nothing_is_measured_and_the_verdict_stands(tmp_path):
    ev = check(tmp_path, REPO / "tasks" / "reference" / "cuda-graph-buffers.diff",
               f"{Path(sys.executable).parent}:/usr/bin:/bin")
    ic = ev["initcheck"]
    assert ic["measured"] is False and ic["note"].startswith("compute-sanitizer not found (looked on PATH"), ic
    assert ev["verdict"] != "fail" and not any("initcheck" in r for r in ev["reasons"])


# The hostile candidate: at import, it finds the sanitizer's command line, points the tool's log at
# /dev/null and leaves a clean report of its own beside it; it also prints a clean one.
HIDE_THE_REPORT = '''

def _hide_initcheck():
    import glob, os, re
    os.write(1, b"========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n")
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = open(cmdline, "rb").read().decode().split("\\0")
        except OSError:
            continue
        if "--log-file" in argv:
            log = argv[argv.index("--log-file") + 1]
            pid = cmdline.split("/")[2]
            path = re.sub("%p", pid, log).replace("%%", "%")
            try:
                os.symlink("/dev/null", path)
                with open(os.path.join(os.path.dirname(path), "initcheck.1.log"), "w") as f:
                    f.write("========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n")
            except OSError:
                pass


_hide_initcheck()
'''


@pytest.mark.slow
def test_a_candidate_cannot_replace_the_tools_report(tmp_path):
    """What the tool reports reaches the harness through a pipe the candidate can add to, never cut."""
    source = TARGET / "miniattn" / "flashattention_backend.py"
    repo = make_repo(tmp_path / "hostile", {"miniattn/flashattention_backend.py": source.read_text()})
    edited = Path(repo.working_dir) / "miniattn/flashattention_backend.py"
    all_empty(edited.parents[1])
    edited.write_text(edited.read_text() + HIDE_THE_REPORT)
    patch = tmp_path / "hostile.diff"
    patch.write_text(repo.git.diff() + "\n")
    ev = check(tmp_path, patch, EMULATED)
    ic = ev["initcheck"]
    assert ic["measured"] and "aten.index.Tensor" in {r["kernel"] for r in ic["reads"]}, ic
    assert any(r.startswith("uninitialised device reads (compute-sanitizer initcheck): ") for r in ev["reasons"])


# A candidate that floods the output, hoping to push the tool's reports out of what the harness keeps.
FLOOD = '''

def _flood():
    import os, stat
    for fd in range(64):  # every pipe this process holds, pytest's saved stdout too
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"=" * (9 << 20))
        except OSError:
            pass


_flood()
'''


@pytest.mark.slow
def test_a_flooded_report_is_not_measured_and_leaves_the_change_unverified(tmp_path):
    source = TARGET / "miniattn" / "flashattention_backend.py"
    repo = make_repo(tmp_path / "hostile", {"miniattn/flashattention_backend.py": source.read_text()})
    repo.git.apply(str(REPO / "tasks" / "reference" / "cuda-graph-buffers.diff"))
    edited = Path(repo.working_dir) / "miniattn/flashattention_backend.py"
    edited.write_text(edited.read_text() + FLOOD)
    patch = tmp_path / "flood.diff"
    patch.write_text(repo.git.diff() + "\n")
    ev = check(tmp_path, patch, EMULATED, command="python -m pytest -q -p no:cacheprovider tests || true")
    ic = ev["initcheck"]
    assert ic["measured"] is False and "bytes more than the 8 MB kept" in ic["note"], ic
    assert ev["verdict"] == "unverified"
    assert any(r.startswith("uninitialised device reads not measured: the run printed") for r in ev["reasons"])

"""Correctness checks on a small real torch package: plain + poisoned runs, coverage of the
change, protected paths, patch hygiene, and the `perfagent check` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.checks import ALWAYS_PROTECTED, Checker, evaluation_table, summarize
from agent.checks.correctness import check_env, failing_tests, install_hook
from agent.checks.coverage import Recorded, classify
from agent.checks.patchinfo import FileLines, added_lines, changes_anything, hygiene_problems
from agent.env.candidate import MAX_DIFF_BYTES
from agent.task import load_task
from agent.env.workspace import PatchError
from helpers import SAFE, TESTS, UNSAFE, make_patch, make_task

@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    """One checker for the module: the baseline workspace and the environment probe are made once."""
    tmp = tmp_path_factory.mktemp("checker")
    task, src = make_task(tmp)
    c = Checker(task, tmp / "work", lock_dir=tmp / "locks", seed=1)
    yield c
    c.close()


@pytest.mark.slow
def test_safe_change_passes_both_runs_and_an_untested_line_makes_it_unverified(checker, tmp_path):
    untested = {"pkg/work.py": ('return "nobody tests this"', 'return "still nobody"  # pragma: no cover')}
    patch = make_patch(Path(checker.task.repo), tmp_path, {**SAFE, **untested})
    ev = checker.evaluate(patch, perf=False)
    assert ev.correctness.plain.passed and ev.correctness.poison.passed, summarize(ev)
    assert ev.verdict == "unverified"
    assert ev.coverage.changed == ["pkg/buffers.py:8", "pkg/work.py:12"]
    assert ev.coverage.covered == ["pkg/buffers.py:8"] and ev.coverage.uncovered == ["pkg/work.py:12"]
    assert ev.diff_stats.files == ["pkg/buffers.py", "pkg/work.py"]
    assert (ev.diff_stats.insertions, ev.diff_stats.deletions) == (2, 2)
    assert ev.perf is None and ev.protected_violations == [] and ev.hygiene.ok
    assert ev.environment.base_commit and ev.environment.candidate_commit and ev.environment.torch
    text = summarize(ev)
    assert "verdict: unverified" in text and "1/2" in text and "pkg/work.py:12" in text
    # the same object round-trips through JSON (it becomes report.json's evaluation)
    again = type(ev).model_validate_json(ev.model_dump_json())
    assert again == ev and json.loads(ev.model_dump_json())["verdict"] == "unverified"


@pytest.mark.slow
def test_zeros_to_empty_on_a_buffer_read_before_written_fails_the_poison_run(checker, tmp_path):
    patch = make_patch(Path(checker.task.repo), tmp_path, UNSAFE)
    ev = checker.evaluate(patch, perf=True)
    assert ev.verdict == "fail"
    assert ev.correctness.plain.passed, "fresh mmap'd pages are zero: the plain run cannot see the bug"
    assert not ev.correctness.poison.passed
    assert ev.correctness.poison.failing_tests == ["tests/test_pkg.py::test_half_ones"]
    assert ev.perf is None, "no perf measurement for an incorrect patch"
    text = summarize(ev)
    assert "poisoned" in text and "test_half_ones" in text


@pytest.mark.slow
def test_editing_a_test_is_rejected_and_checked_against_the_original_tests(checker, tmp_path):
    # break the code and "fix" the test to match: the original test still runs, and fails
    patch = make_patch(Path(checker.task.repo), tmp_path, {
        "pkg/work.py": ("x += i", "x += 2 * i"),
        "tests/test_pkg.py": ("== 45", "== 90"),
    })
    ev = checker.evaluate(patch)
    assert ev.verdict == "rejected"
    assert ev.protected_violations == ["tests/test_pkg.py"]
    assert any("tests/test_pkg.py" in r for r in ev.reasons)
    assert not ev.correctness.plain.passed and ev.correctness.plain.failing_tests == ["tests/test_pkg.py::test_spin"]
    assert ev.diff_stats.files == ["pkg/work.py", "tests/test_pkg.py"]


def test_a_new_conftest_is_protected_even_if_the_task_does_not_say_so(tmp_path):
    task, src = make_task(tmp_path, correctness="true", poison=False)
    patch = make_patch(src, tmp_path, {"conftest.py": "collect_ignore = ['tests']\n"})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(patch, perf=False)
    assert "conftest.py" in ALWAYS_PROTECTED
    assert ev.verdict == "rejected" and ev.protected_violations == ["conftest.py"]


def test_binary_and_escaping_patches_are_refused_without_being_applied(tmp_path):
    task, src = make_task(tmp_path, correctness="true", poison=False)
    binary = ("diff --git a/blob.bin b/blob.bin\nnew file mode 100644\nindex 0000000..e69de29\n"
              "GIT binary patch\nliteral 3\nKcmZQzWB>pF00031\n\nliteral 0\nHcmV?d00001\n\n")
    escape = "--- a/../outside.py\n+++ b/../outside.py\n@@ -0,0 +1 @@\n+x = 1\n"
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        for patch, word in [(binary, "binary"), (escape, "outside")]:
            ev = c.evaluate(patch)
            assert ev.verdict == "rejected" and not ev.hygiene.ok
            assert word in " ".join(ev.hygiene.problems)
            assert ev.correctness is None
        assert c.sides._baseline is None, "a refused patch does not even need a workspace"
    assert not (tmp_path / "outside.py").exists()


def test_a_diff_over_the_size_limit_is_refused_at_once_naming_its_size_and_the_limit(tmp_path):
    """Seven new 900 kB text files: each under the new-file limit, together over the whole diff's."""
    task, src = make_task(tmp_path, correctness="true", poison=False)
    patch = make_patch(src, tmp_path, {f"data/part{i}.txt": "row\n" * 225_000 for i in range(7)})
    size = len(patch.encode())
    assert size > MAX_DIFF_BYTES and f"{size:,} bytes" in hygiene_problems(patch)[0]
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(patch)
        assert c.sides._baseline is None, "never graded: no workspace was even made"
    assert ev.verdict == "rejected" and ev.correctness is None
    assert ev.hygiene.problems == [f"diff too large: {size:,} bytes, over the 5 MB limit (not graded)"]


def test_a_patch_that_does_not_apply_raises_patch_error(tmp_path):
    task, src = make_task(tmp_path, correctness="true", poison=False)
    bad = "--- a/pkg/work.py\n+++ b/pkg/work.py\n@@ -1 +1 @@\n-ITERS = 999\n+ITERS = 1\n"
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        with pytest.raises(PatchError):
            c.evaluate(bad)
        assert not (tmp_path / "work" / "side-c" / "repo" / "pkg" / "work.py").read_text().startswith("ITERS = 1")


def test_nothing_a_candidate_leaves_in_its_folder_reaches_the_next_one(tmp_path):
    """One folder serves every candidate (its warm interpreters stay); files a candidate's run
    writes there, git-ignored ones too, are gone before the next evaluation starts."""
    task, src = make_task(tmp_path, correctness="python -m pkg.work", poison=False)
    planter = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", (
        "ITERS = 60_000\nimport pathlib\nfor f in ('.gitignore', 'cache.bin', 'sub/x.py'):\n"
        "    pathlib.Path(f).parent.mkdir(exist_ok=True)\n    pathlib.Path(f).write_text('cache.bin\\n')"))})
    reader = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", (
        "ITERS = 60_000\nimport pathlib\nassert not any(pathlib.Path(f).exists() for f in "
        "('.gitignore', 'cache.bin', 'sub/x.py')), 'a leftover'"))})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        assert c.evaluate(planter, perf=False).verdict == "pass"
        slot = tmp_path / "work" / "side-c" / "repo"
        assert not (slot / "cache.bin").exists() and not (slot / "sub").exists()
        ev = c.evaluate(reader, perf=False)
        assert ev.verdict == "pass", summarize(ev)


def test_hygiene_problems_of_raw_patches():
    ok = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n--- a comment line\n+--- changed\n keep\n"
    assert hygiene_problems(ok) == []  # "--- " inside a hunk is content, not a header
    assert hygiene_problems("") == []
    assert "absolute" in hygiene_problems("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n")[0]
    link = ("diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1111111\n"
            "--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n")
    assert "symbolic link" in hygiene_problems(link)[0]
    assert "inside .git" in hygiene_problems("--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n")[0]
    assert "binary" in hygiene_problems("diff --git a/a.png b/a.png\nBinary files a/a.png and b/a.png differ\n")[0]


def test_added_lines_are_new_side_line_numbers():
    diff = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -2,0 +3,2 @@\n+a\n+b\n@@ -10 +11 @@\n-x\n+y\n"
            "diff --git a/gone.py b/gone.py\n--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-z\n")
    assert [(f.path, f.lines) for f in added_lines(diff)] == [("m.py", [3, 4, 11])]


def test_coverage_folds_multiline_statements_and_skips_non_code(tmp_path):
    (tmp_path / "m.py").write_text('def f(a,\n      b):\n    """doc"""\n    x = (a +\n         b)\n    # note\n\n'
                                   "    return x\n\n\ndef g():\n    return 1\n")
    (tmp_path / "notes.txt").write_text("x\n")
    changed = [FileLines("m.py", [3, 5, 6, 7, 8, 12]), FileLines("notes.txt", [1])]
    res = classify(tmp_path, changed, Recorded(lines={str((tmp_path / "m.py").resolve()): {1, 4, 8}}))
    assert res.changed == ["m.py:5", "m.py:8", "m.py:12"]
    assert res.covered == ["m.py:5", "m.py:8"] and res.uncovered == ["m.py:12"]
    assert res.unmeasured_files == ["notes.txt"]


def test_failing_test_ids_from_pytest_output():
    out = ("F.E\nFAILED tests/test_a.py::test_x - assert 1 == 2\nERROR tests/test_b.py::test_y[cpu-1] - Runtime\n"
           "tests/test_c.py::test_z FAILED\nFAILED tests/test_a.py::test_x - again\n2 failed\n")
    assert failing_tests(out) == ["tests/test_a.py::test_x", "tests/test_b.py::test_y[cpu-1]",
                                  "tests/test_c.py::test_z"]


def test_failing_modes_from_any_test_runner():
    """A script that prints pytest-style lines, and unittest, are named too; prose is not."""
    script = ("decode ok\nFAILED draft_topk2[bs3] - cu_seqlens_k[0] = 9223372036854775807, expected 0\n"
              "FAILED encoder_decoder\nERROR: something went wrong\nFAILED to import x: reason\n1 failed, 5 passed\n")
    assert failing_tests(script) == ["draft_topk2[bs3]", "encoder_decoder"]
    unit = "FAIL: test_replay (tests.test_graph.GraphTest)\nERROR: test_fill (tests.test_graph.GraphTest)\n"
    assert failing_tests(unit) == ["test_replay (tests.test_graph.GraphTest)", "test_fill (tests.test_graph.GraphTest)"]


@pytest.mark.slow
def test_poison_hook_fills_uninitialised_memory_and_chains_an_existing_sitecustomize(tmp_path):
    hook = install_hook(tmp_path / "hook")
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_HOOK_RAN = True\n")
    code = ("import builtins, torch\n"
            "print(torch.empty(3).isnan().all().item(), torch.empty(2, dtype=torch.int32).tolist(),"
            " getattr(builtins, 'OTHER_HOOK_RAN', False))")
    env = check_env(tmp_path, hook, poison=True)
    env["PYTHONPATH"] += f":{other}"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.split() == ["True", "[2147483647,", "2147483647]", "True"], out.stderr
    # without poison nothing changes and torch is not imported by the hook
    plain = subprocess.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"],
                           env=check_env(tmp_path, hook), capture_output=True, text=True, cwd=tmp_path)
    assert plain.stdout.strip() == "False", plain.stderr


def test_verdict_table_renders(tmp_path):
    from rich.console import Console

    task, src = make_task(tmp_path, correctness="true", poison=False)
    comment = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = 60_000  # same code")})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(comment, perf=False)
        nothing = c.evaluate("", perf=False)
    console = Console(record=True, width=160)
    console.print(evaluation_table(ev))
    text = console.export_text()
    assert "fixture" in text and "pass" in text and "protected paths" in text
    console = Console(record=True, width=160)
    console.print(evaluation_table(nothing))
    text = console.export_text()
    assert "no-change" in text and "changes nothing" in text and "protected paths" not in text


def test_an_empty_or_blank_only_patch_is_no_change_without_running_anything(tmp_path):
    """Nothing to grade: no workspace, no tests, no perf; answered at once."""
    task, src = make_task(tmp_path)
    blank = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = 60_000   \n")})
    assert blank.strip(), "a real diff, of blank lines and trailing spaces only"
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        for patch in ("", "\n", blank):
            ev = c.evaluate(patch, perf=True, reference=True)
            assert ev.verdict == "no-change" and ev.correctness is None and ev.perf is None, summarize(ev)
        assert not (tmp_path / "work").exists(), "not even a baseline workspace was made"


def test_changes_anything_counts_code_indentation_and_file_operations_but_not_blanks():
    body = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,3 @@\n a = 1\n-b = 2\n+{new}\n+\n"
    assert not changes_anything(body.format(new="b = 2   "))
    assert changes_anything(body.format(new="b = 3"))
    assert changes_anything(body.format(new="    b = 2")), "indentation is Python syntax"
    assert changes_anything("diff --git a/e.py b/e.py\nnew file mode 100644\n--- /dev/null\n+++ b/e.py\n")
    assert changes_anything("diff --git a/s b/s\nold mode 100644\nnew mode 100755\n")
    assert not changes_anything("") and not changes_anything("\n\n")


# -- the `perfagent check` command ------------------------------------------------------------
def perfagent(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": str(cwd)})


@pytest.mark.slow
def test_check_command_grades_a_patch_file_and_writes_json(tmp_path):
    task, src = make_task(tmp_path, min_effect=0.2)
    patch = tmp_path / "safe.diff"
    patch.write_text(make_patch(src, tmp_path, SAFE))
    res = perfagent("check", str(tmp_path / "task.toml"), "--patch", str(patch), "--quick", "--json",
                    str(tmp_path / "ev.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    for word in ("correctness", "poison", "coverage of change", "protected paths", "speedup", "pass"):
        assert word in res.stdout
    data = json.loads((tmp_path / "ev.json").read_text())
    assert data["verdict"] == "pass" and data["perf"]["n_pairs"] >= 4 and data["perf"]["p_value"] is not None
    assert (tmp_path / ".cache/perfagent/locks/cpu.lock").exists(), "the default lock dir is under HOME"


def test_check_command_answers_an_empty_patch_no_change_without_measuring(tmp_path):
    task, src = make_task(tmp_path)
    (tmp_path / "empty.diff").write_text("")
    res = perfagent("check", str(tmp_path / "task.toml"), "--patch", str(tmp_path / "empty.diff"), "--reference",
                    "--json", str(tmp_path / "ev.json"), cwd=tmp_path)
    assert res.returncode == 0 and "no-change" in res.stdout, res.stdout + res.stderr
    data = json.loads((tmp_path / "ev.json").read_text())
    assert data["verdict"] == "no-change" and data["perf"] is None and data["correctness"] is None
    assert not (tmp_path / ".cache/perfagent/locks/cpu.lock").exists(), "nothing was measured"


def test_check_command_bad_input_exits_2_with_one_line(tmp_path, capsys):
    from agent.cli import main

    make_task(tmp_path, correctness="true", poison=False)
    bad = tmp_path / "bad.diff"
    bad.write_text("--- a/pkg/work.py\n+++ b/pkg/work.py\n@@ -1 +1 @@\n-ITERS = 999\n+ITERS = 1\n")
    (tmp_path / "broken.toml").write_text('id = "x"\n')
    cases = [("task.toml", bad, "does not apply"), ("task.toml", tmp_path / "missing.diff", "cannot read patch"),
             ("broken.toml", bad, "broken.toml")]
    for toml, patch, words in cases:
        code = main(["check", str(tmp_path / toml), "--patch", str(patch), "--lock-dir", str(tmp_path / "locks")])
        err = capsys.readouterr().err
        assert code == 2, err
        flat = " ".join(err.split())  # rich wraps long lines
        assert "Traceback" not in err and "error:" in flat and words in flat.split("error:", 1)[1]


def test_uncovered_lines_are_listed_compactly():
    from agent.checks.render import compact_lines

    assert compact_lines(["a.py:3", "a.py:4", "a.py:5", "a.py:9", "b.py:1"]) == "a.py:3-5,9; b.py:1"


@pytest.mark.slow
def test_check_command_bare_json_prints_only_the_evaluation(tmp_path, capsys):
    from agent.cli import main

    task, src = make_task(tmp_path, correctness=TESTS.replace("tests", "tests -k spin"), poison=False)
    patch = tmp_path / "p.diff"
    patch.write_text(make_patch(src, tmp_path, {"pkg/work.py": ("x += i", "x = x + i")}))
    code = main(["check", str(tmp_path / "task.toml"), "--patch", str(patch), "--no-perf", "--json",
                 "--lock-dir", str(tmp_path / "locks")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["verdict"] == "pass" and data["perf"] is None
    assert data["coverage"]["covered"] == ["pkg/work.py:7"] and data["diff_stats"]["insertions"] == 1


def test_a_patch_that_rewires_test_collection_is_refused_before_anything_runs(tmp_path):
    task, src = make_task(tmp_path, poison=False)
    marker = tmp_path / "plugin-ran"
    patch = make_patch(src, tmp_path, {
        "pkg/work.py": ("x += i", "x += 2 * i"),  # breaks test_spin
        "pytest.toml": '[pytest]\naddopts = ["-p", "evilplugin"]\n',
        "evilplugin.py": f"open({str(marker)!r}, 'w').close()\n",
    })
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(patch)
    assert ev.verdict == "rejected" and ev.correctness is None and ev.perf is None
    assert any("pytest.toml" in r for r in ev.integrity.refused)
    assert not marker.exists()


@pytest.mark.slow
def test_code_that_sniffs_pytest_or_patches_torch_is_suspicious_not_pass(tmp_path):
    task, src = make_task(tmp_path, poison=False)
    patch = make_patch(src, tmp_path, {"pkg/buffers.py": ("import torch\n",
                                                          "import sys\nimport torch\n"
                                                          "if 'pytest' in sys.modules:\n"
                                                          "    torch.empty = torch.zeros\n")})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(patch, perf=False)
    # flagged; and its `if` never takes the arm without pytest in the tests, so coverage speaks first where it does
    assert ev.correctness.plain.passed and not ev.correctness.poison_enabled and ev.verdict in ("suspicious",
                                                                                                  "unverified")
    assert any(r.startswith("flagged:") for r in ev.reasons), ev.reasons
    reasons = " ".join(f.reason for f in ev.integrity.flags)
    assert "pytest" in reasons and "torch" in reasons
    assert "integrity" in evaluation_table_text(ev)


@pytest.mark.slow
def test_a_speedup_beyond_the_hint_passes_when_the_harness_clock_sees_it(tmp_path):
    """100x (the bench's 25 calls of a loop cut from 60 000 to 600 iterations), beyond the task's
    max_speedup hint of 3x: the bench processes' wall and CPU time show the saving, so it is faster."""
    task, src = make_task(tmp_path, poison=False, min_effect=0.5, extra="")
    toml = Path(task.file)
    toml.write_text(toml.read_text().replace("min_effect = 0.5", "min_effect = 0.5\nmax_speedup = 3\ncalls = 25"))
    task = load_task(toml)
    patch = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = 600")})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks", seed=1) as c:
        ev = c.evaluate(patch)
    o = ev.perf.outside
    assert ev.perf.verdict == "faster" and ev.perf.speedup > 3 and ev.verdict == "pass", (ev.reasons, o)
    assert o.confirmed and o.calls == 25 and len(o.candidate_cpu_s) == ev.perf.n_pairs
    assert "outside clock: confirmed" in summarize(ev)


def evaluation_table_text(ev) -> str:
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(evaluation_table(ev))
    return console.export_text()

"""`perfagent tasks import`: GSO and SWE-bench records (the published field names) as task files that the
validator accepts and `perfagent check` grades, on small real git repos made here (never the network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import git
import pytest
from helpers import commit, make_repo, perfagent_cli as perfagent

from agent.task import load_task, tomllib
from agent.interchange.task_import import toml_str

REPO = Path(__file__).resolve().parents[2]


def diff(repo, a: str, b: str) -> str:
    return repo.git.diff(a, b) + "\n"


# -- GSO: a slow sum, a GSO-shaped performance test, the expert commit that makes it fast ------------------
SLOW = '''def total(xs, rounds=40):
    s = 0
    for _ in range(rounds):
        for x in xs:
            s += x
    return s
'''
FAST = '''def total(xs, rounds=40):
    return sum(xs) * rounds
'''
# The shape of GSO's tests: setup / experiment / store, load, check equivalence / run_test, timed with timeit
# under the template GSO's harness sets, and its main() (output file, --eqcheck, --reference, --file_prefix).
GSO_BODY = '''import json
import timeit

from fastpkg.core import total


def setup():
    return list(range(20_000))


def experiment(data):
    return {"total": total(data)}


def store_result(result, filename):
    with open(filename, "w") as f:
        json.dump(result, f)


def load_result(filename):
    with open(filename) as f:
        return json.load(f)


def check_equivalence(reference, current):
    assert reference == current, f"{reference} != {current}"


def run_test(eqcheck: bool = False, reference: bool = False, prefix: str = "") -> float:
    data = setup()
    execution_time, result = timeit.timeit(lambda: experiment(data), number=1)
    filename = f"{prefix}_result.json"
    if reference:
        store_result(result, filename)
    if eqcheck:
        check_equivalence(load_result(filename), result)
    return execution_time
'''
GSO_TEST = GSO_BODY + '''

timeit.template = """
def inner(_it, _timer{init}):
    {setup}
    _t0 = _timer()
    for _i in _it:
        retval = {stmt}
    _t1 = _timer()
    return _t1 - _t0, retval
"""


def main():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("output_file")
    parser.add_argument("--eqcheck", action="store_true")
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--file_prefix", type=str)
    args = parser.parse_args()
    execution_time = run_test(args.eqcheck, args.reference, args.file_prefix)
    with open(args.output_file, "a") as f:
        f.write(f"Execution time: {execution_time:.6f}s\\n")


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def gso(tmp_path):
    """A mirror folder holding acme/fastpkg as acme__fastpkg, and three GSO records of it (the third invalid)."""
    repo = make_repo(tmp_path / "mirrors" / "acme__fastpkg", {
        "fastpkg/__init__.py": "", "fastpkg/core.py": SLOW,
        "tests/test_core.py": "from fastpkg.core import total\n\n\ndef test_total():\n"
                              "    assert total([1, 2, 3], rounds=2) == 12\n"})
    base = repo.head.commit.hexsha
    opt = commit(repo, {"fastpkg/core.py": FAST}, "core: total with sum()")
    gold = diff(repo, base, opt)
    common = {"repo": "acme/fastpkg", "base_commit": base, "opt_commit": opt, "api": "fastpkg.core.total",
              "hints_text": "core: total with sum()", "gt_commit_message": "core: total with sum()",
              "created_at": "2025-01-02 03:04:05", "gt_diff": gold,
              "setup_commands": ["sudo apt-get install -y git"]}
    records = [
        {"instance_id": "acme__fastpkg-1a2b3c4", **common, "prob_script": GSO_BODY, "tests": [GSO_TEST],
         "install_commands": ["uv venv", "source .venv/bin/activate", "uv pip install -e ."]},
        {"instance_id": "acme__fastpkg-5d6e7f8", **common, "prob_script": GSO_BODY,
         "install_commands": ["uv venv --python 3.11", "source .venv/bin/activate", "uv pip install . --reinstall",
                              "uv pip install requests dill"], "difficulty": "hard"},
        {"instance_id": "acme__fastpkg-0badbad", **common, "base_commit": "0" * 40, "prob_script": GSO_BODY},
    ]
    (tmp_path / "gso.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "gold.diff").write_text(gold)
    return tmp_path


def comments(task_file: Path) -> str:
    return "\n".join(ln for ln in task_file.read_text().splitlines() if ln.startswith("#"))


def test_gso_records_become_valid_tasks_with_every_unmapped_field_named(gso):
    res = perfagent("tasks", "import", "gso.jsonl", "--format", "gso", "--out", "imported", "--repos", "mirrors",
                    cwd=gso)
    assert res.returncode == 1, res.stdout + res.stderr  # two written, one failed
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: gso.jsonl line 3 (acme__fastpkg-0badbad): ") and "base" in line
    assert "unknown commit" in line and "Traceback" not in res.stderr
    assert "imported 2 of 3 record(s)" in res.stdout
    out = gso / "imported"
    assert sorted(p.name for p in out.glob("*.toml")) == ["acme__fastpkg-1a2b3c4.toml", "acme__fastpkg-5d6e7f8.toml"]
    assert not (out / "acme__fastpkg-0badbad").exists(), "a record that failed leaves nothing behind"

    one = load_task(out / "acme__fastpkg-1a2b3c4.toml")
    s = one.spec
    assert one.repo == str((gso / "mirrors" / "acme__fastpkg").resolve())
    assert s.base == json.loads((gso / "gso.jsonl").read_text().splitlines()[0])["base_commit"]
    assert s.setup is None, "uv venv / activate / install the checkout: perfagent's own"
    assert s.perf is not None and s.perf.metric == "gso_time_s" and s.perf.direction == "lower"
    assert one.reference_patch.read_text() == (gso / "gold.diff").read_text()
    assert one.read == ((out / "acme__fastpkg-1a2b3c4").resolve(),)
    assert "def run_test" in s.prompt and "fastpkg.core.total" in s.prompt
    assert (out / "acme__fastpkg-1a2b3c4" / "gso_test_0.py").read_text() == GSO_TEST
    notes = comments(out / "acme__fastpkg-1a2b3c4.toml")
    for name in ("opt_commit", "hints_text", "gt_commit_message", "created_at", "setup_commands",
                 "install_commands: `uv pip install -e .`", "install_commands: `uv venv`"):
        assert f"# not mapped: {name}" in notes, name
    for mapped in ("# not mapped: gt_diff", "# not mapped: prob_script", "# not mapped: tests",
                   "# not mapped: repo", "# not mapped: base_commit", "# not mapped: api"):
        assert mapped not in notes

    two = load_task(out / "acme__fastpkg-5d6e7f8.toml").spec
    assert two.setup is not None and two.setup.python == "python3.11"
    assert two.setup.venv == ["uv pip install requests dill"]
    notes = comments(out / "acme__fastpkg-5d6e7f8.toml")
    assert "# not mapped: install_commands: `uv pip install . --reinstall`" in notes
    assert "# not mapped: difficulty (not a field of the published GSO records)" in notes
    assert (out / "acme__fastpkg-5d6e7f8" / "prob_script.py").is_file()

    listed = perfagent("tasks", "imported", cwd=gso)
    assert listed.returncode == 0 and "perf:gso_time_s" in listed.stdout, listed.stdout + listed.stderr


def test_the_gso_runner_checks_against_the_base_and_times_a_prob_script_alone(gso):
    """The generated runner as a user runs it by hand, in the mirror (no sandbox): a prob_script without
    GSO's harness still times (the runner sets the timeit template), and an equivalence failure is named."""
    assert perfagent("tasks", "import", "gso.jsonl", "--format", "gso", "--out", "imported", "--repos", "mirrors",
                     cwd=gso).returncode == 1
    mirror = gso / "mirrors" / "acme__fastpkg"
    base = load_task(gso / "imported" / "acme__fastpkg-5d6e7f8.toml").spec.base
    subprocess.run(["git", "checkout", "-q", base], cwd=mirror, check=True)
    env = {**os.environ, "PYTHONPATH": str(mirror)}
    runner = gso / "imported" / "acme__fastpkg-5d6e7f8" / "gso_run.py"
    perf = subprocess.run([sys.executable, str(runner), "perf"], cwd=mirror, env=env, capture_output=True, text=True)
    assert perf.returncode == 0, perf.stderr
    line = json.loads(perf.stdout.strip().splitlines()[-1])
    assert line["metric"] == "gso_time_s" and line["unit"] == "s" and line["value"] > 0
    ok = subprocess.run([sys.executable, str(runner), "check"], cwd=mirror, env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and "PASSED prob_script.py" in ok.stdout, ok.stdout + ok.stderr
    (mirror / "fastpkg" / "core.py").write_text(SLOW.replace("s += x", "s += x + 1"))
    wrong = subprocess.run([sys.executable, str(runner), "check"], cwd=mirror, env=env, capture_output=True,
                           text=True)
    assert wrong.returncode == 1 and "FAILED prob_script.py - AssertionError" in wrong.stdout, wrong.stdout


@pytest.mark.slow(seconds=40)
def test_an_imported_gso_task_grades_its_gold_patch_end_to_end_with_the_reference(gso):
    assert perfagent("tasks", "import", "gso.jsonl", "--format", "gso", "--out", "imported", "--repos", "mirrors",
                     cwd=gso).returncode == 1
    res = perfagent("check", "imported/acme__fastpkg-1a2b3c4.toml", "--patch", "gold.diff", "--reference",
                    "--json", "ev.json", cwd=gso)
    assert res.returncode == 0, res.stdout + res.stderr
    ev = json.loads((gso / "ev.json").read_text())
    assert ev["verdict"] == "pass", ev["reasons"]
    assert ev["correctness"]["plain"]["passed"] and ev["correctness"]["poison"]["passed"]
    assert ev["coverage"]["uncovered"] == [] and ev["coverage"]["covered"]
    assert "key" not in (ev["coverage"]["note"] or ""), "the base's process records nothing (it runs clean)"
    assert ev["perf"]["verdict"] == "faster", ev["perf"]
    assert ev["reference"]["speedup"] and ev["reference"]["speedup"] > 2, ev["reference"]


# -- SWE-bench: a bug, the test patch that shows it, the fix ------------------------------------------------
OPS = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return max(lo, x)\n"
TESTS = ("from calc.ops import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_clamp_low():\n    assert clamp(-5, 0, 10) == 0\n")
NEW_TEST = "\n\ndef test_clamp_high():\n    assert clamp(50, 0, 10) == 10\n"


@pytest.fixture
def swe(tmp_path):
    """A mirror folder holding acme/calc as calc, and three SWE-bench records of it (the third names a repo
    with no mirror)."""
    repo = make_repo(tmp_path / "mirrors" / "calc", {"calc/__init__.py": "", "calc/ops.py": OPS,
                                                     "tests/test_ops.py": TESTS})
    base = repo.head.commit.hexsha
    tests = commit(repo, {"tests/test_ops.py": TESTS + NEW_TEST}, "tests: clamp from above")
    fixed = commit(repo, {"calc/ops.py": OPS.replace("max(lo, x)", "min(hi, max(lo, x))")}, "clamp: the upper bound")
    test_patch, gold = diff(repo, base, tests), diff(repo, tests, fixed)
    repo.git.reset("--hard", base)
    common = {"repo": "acme/calc", "base_commit": base, "patch": gold, "test_patch": test_patch,
              "problem_statement": "clamp() ignores its upper bound\n\nclamp(50, 0, 10) returns 50.",
              "hints_text": "", "created_at": "2024-05-06T07:08:09Z", "version": "1.0",
              "environment_setup_commit": base}
    f2p = ["tests/test_ops.py::test_clamp_high"]
    p2p = ["tests/test_ops.py::test_add", "tests/test_ops.py::test_clamp_low"]
    records = [
        {"instance_id": "acme__calc-1", **common, "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p)},
        {"instance_id": "acme__calc-2", **common, "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "difficulty": "<15 min"},
        {"instance_id": "other__thing-3", **common, "repo": "other/thing", "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p},
    ]
    (tmp_path / "swe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "gold.diff").write_text(gold)
    (tmp_path / "wrong.diff").write_text(diff(repo, base, commit(repo, {"calc/ops.py": OPS.replace(
        "return a + b", "return b + a")}, "not the fix")))
    repo.git.reset("--hard", base)
    return tmp_path


def test_swebench_records_become_valid_tasks_with_every_unmapped_field_named(swe):
    res = perfagent("tasks", "import", "swe.jsonl", "--format", "swebench", "--out", "imported", "--repos", "mirrors",
                    cwd=swe)
    assert res.returncode == 1, res.stdout + res.stderr
    (line,) = res.stderr.splitlines()
    assert line == ("error: swe.jsonl line 3 (other__thing-3): repo: no mirror of other/thing in mirrors "
                    "(looked for other__thing, thing)")
    for n in (1, 2):
        task = load_task(swe / "imported" / f"acme__calc-{n}.toml")
        s = task.spec
        assert task.repo == str((swe / "mirrors" / "calc").resolve()) and s.perf is None
        assert s.prompt.startswith("clamp() ignores its upper bound") and s.title == "clamp() ignores its upper bound"
        assert s.protected == ["tests/test_ops.py"]
        assert s.setup is not None and s.setup.command.startswith("git apply") and "test.patch" in s.setup.command
        assert task.reference_patch.read_text() == (swe / "gold.diff").read_text()
        check = json.loads((swe / "imported" / f"acme__calc-{n}" / "swe_check.json").read_text())
        assert check["FAIL_TO_PASS"] == ["tests/test_ops.py::test_clamp_high"]
        notes = comments(task.file)
        for name in ("hints_text", "created_at", "version", "environment_setup_commit"):
            assert f"# not mapped: {name} (" in notes, name
        assert ("# not mapped: difficulty (not a field of the published SWE-bench records)" in notes) == (n == 2)
        for mapped in ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement"):
            assert f"# not mapped: {mapped} " not in notes


@pytest.mark.slow(seconds=30)
def test_an_imported_swebench_task_passes_the_fix_and_fails_a_change_that_is_not_one(swe):
    """The test patch is applied in every checkout; FAIL_TO_PASS is required of a change, not of the unchanged
    base (so a wrong change is `fail`, never "the task cannot be checked")."""
    assert perfagent("tasks", "import", "swe.jsonl", "--format", "swebench", "--out", "imported", "--repos",
                     "mirrors", cwd=swe).returncode == 1
    for patch, verdict in (("gold.diff", "pass"), ("wrong.diff", "fail")):
        res = perfagent("check", "imported/acme__calc-1.toml", "--patch", patch, "--no-perf", "--json", "ev.json",
                        cwd=swe)
        assert res.returncode == 0, res.stdout + res.stderr
        ev = json.loads((swe / "ev.json").read_text())
        assert ev["verdict"] == verdict, (patch, ev["reasons"], ev["correctness"])
    plain = ev["correctness"]["plain"]
    assert plain["failing_tests"] == ["tests/test_ops.py::test_clamp_high"], plain


# -- bad input ---------------------------------------------------------------------------------------------
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path):
    good = {"instance_id": "a__b-1", "repo": "a/b", "base_commit": "abc", "patch": "", "problem_statement": "x",
            "FAIL_TO_PASS": [], "PASS_TO_PASS": ["t.py::t"]}
    (tmp_path / "bad.jsonl").write_text(json.dumps(good) + "\n{\"instance_id\": \"a__b-2\",\n")
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    cases = [(("bad.jsonl", "--format", "swebench"), "error: bad.jsonl: line 2: not valid JSON"),
             (("list.jsonl", "--format", "swebench"), "error: list.jsonl: line 1: not a JSON object (a list)"),
             (("missing.jsonl", "--format", "gso"), "error: missing.jsonl: no such file"),
             (("bad.jsonl", "--format", "swe-bench"), "error: unknown --format 'swe-bench'; formats: gso, swebench"),
             (("bad.jsonl",), "error: give --format: gso or swebench")]
    for args, said in cases:
        res = perfagent("tasks", "import", *args, "--out", "out", cwd=tmp_path)
        assert res.returncode == 2 and res.stderr.strip().startswith(said), (args, res.stderr)
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_an_invalid_record_is_named_and_the_others_are_still_written(tmp_path):
    """Without --repos the repo is its GitHub URL (not cloned here: the validator does not look at a URL)."""
    rec = {"repo": "a/b", "base_commit": "abc", "patch": "", "problem_statement": "fix it", "PASS_TO_PASS": ["t.py::t"]}
    lines = [{"instance_id": "a__b-1", **rec}, {"instance_id": "../escape", **rec},
             {"instance_id": "a__b-3", **rec, "problem_statement": ""},
             {"instance_id": "a__b-4", **rec, "FAIL_TO_PASS": "not json"}, {"instance_id": "a__b-1", **rec}]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    res = perfagent("tasks", "import", "r.jsonl", "--format", "swebench", "--out", "out", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "error: r.jsonl line 2 (../escape): instance_id: '../escape' cannot be a task id ([A-Za-z0-9][A-Za-z0-9._-]*)",
        "error: r.jsonl line 3 (a__b-3): problem_statement: empty",
        "error: r.jsonl line 4 (a__b-4): FAIL_TO_PASS: a string that is not a JSON-encoded list",
        "error: r.jsonl line 5 (a__b-1): instance_id: a__b-1 again (an earlier line has it)"]
    assert [p.name for p in (tmp_path / "out").glob("*.toml")] == ["a__b-1.toml"]
    task = load_task(tmp_path / "out" / "a__b-1.toml")
    assert task.repo == "https://github.com/a/b" and task.spec.reference is None
    assert "# not mapped: patch (empty: the task has no reference patch)" in comments(task.file)
    assert not (tmp_path / "escape").exists()


def test_tasks_path_still_lists_and_toml_strings_round_trip(tmp_path):
    res = perfagent("tasks", "tasks", cwd=REPO)
    assert res.returncode == 0 and "cuda-graph-buffers" in res.stdout, res.stderr
    for s in ["plain", 'quo"te\\back', "tab\there", "multi\nline with \"\"\" and \\ and \x01 and \x7f\r\n", "é\n"]:
        assert tomllib.loads(f"v = {toml_str(s)}")["v"].rstrip("\n") == s.rstrip("\n")


# -- a record is data: the runners are the package's files, what differs is JSON beside them ------------------
RUNNERS = REPO / "agent" / "interchange" / "runners"


def test_the_runners_are_the_packages_own_files_and_the_record_is_json_beside_them(gso, swe):
    assert perfagent("tasks", "import", "gso.jsonl", "--format", "gso", "--out", "imported", "--repos", "mirrors",
                     cwd=gso).returncode == 1
    folder = gso / "imported" / "acme__fastpkg-5d6e7f8"
    assert (folder / "gso_run.py").read_bytes() == (RUNNERS / "gso_run.py").read_bytes()
    record = json.loads((gso / "gso.jsonl").read_text().splitlines()[1])
    assert json.loads((folder / "gso_run.json").read_text()) == {
        "instance": "acme__fastpkg-5d6e7f8", "base": record["base_commit"], "scripts": ["prob_script.py"],
        "metric": "gso_time_s"}
    text = (gso / "imported" / "acme__fastpkg-5d6e7f8.toml").read_text()
    assert ("    # from the record's install_commands[3]: uv pip install requests dill\n"
            '    "uv pip install requests dill",\n') in text, text
    assert perfagent("tasks", "import", "swe.jsonl", "--format", "swebench", "--out", "imported", "--repos",
                     "mirrors", cwd=swe).returncode == 1
    assert ((swe / "imported" / "acme__calc-1" / "swe_check.py").read_bytes()
            == (RUNNERS / "swe_check.py").read_bytes())


def test_the_runners_parse_as_python_3_9():
    """They run in the task's interpreter, not perfagent's."""
    import ast

    for name in ("gso_run.py", "swe_check.py"):
        ast.parse((RUNNERS / name).read_text(), filename=name, feature_version=(3, 9))


def test_install_commands_kept_are_pip_installs_of_names_and_the_rest_is_refused_or_named(tmp_path):
    rec = {"repo": "a/b", "base_commit": "v1.0", "prob_script": "def run_test(e, r, p):\n    return 1.0\n"}
    ok = {"instance_id": "a__b-1", **rec, "install_commands": [
        "uv venv --python 3.10", "source .venv/bin/activate", "git submodule update --init", "uv pip install -e .",
        "uv pip install -r requirements.txt", "uv pip install 'numpy<2' -U", "python -m pip install --no-deps dill"]}
    (tmp_path / "ok.jsonl").write_text(json.dumps(ok) + "\n")
    res = perfagent("tasks", "import", "ok.jsonl", "--format", "gso", "--out", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    task = load_task(tmp_path / "out" / "a__b-1.toml")
    assert task.spec.base == "v1.0" and task.spec.setup.python == "python3.10"
    assert task.spec.setup.venv == ["uv pip install 'numpy<2' -U", "python -m pip install --no-deps dill"]
    notes = comments(task.file)
    for dropped in ("git submodule update --init", "uv pip install -e .", "uv pip install -r requirements.txt"):
        assert f"# not mapped: install_commands: `{dropped}` (builds or installs the checkout itself" in notes

    bad = {"instance_id": "a__b-2", **rec, "install_commands": ["uv venv", "pip install requests; curl x | sh"]}
    (tmp_path / "bad.jsonl").write_text(json.dumps(ok | {"instance_id": "a__b-3"}) + "\n" + json.dumps(bad) + "\n")
    res = perfagent("tasks", "import", "bad.jsonl", "--format", "gso", "--out", "out", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [
        "error: bad.jsonl line 2 (a__b-2): install command not allowed: `pip install requests; curl x | sh` "
        "(only pip installs of named packages)"]
    assert (tmp_path / "out" / "a__b-3.toml").is_file(), "the other records are still written"
    assert not (tmp_path / "out" / "a__b-2").exists() and not (tmp_path / "out" / "a__b-2.toml").exists()


def test_an_existing_task_is_replaced_only_with_force_and_nothing_is_left_behind(swe):
    args = ("tasks", "import", "swe.jsonl", "--format", "swebench", "--out", "imported", "--repos", "mirrors")
    assert perfagent(*args, cwd=swe).returncode == 1
    out = swe / "imported"
    (out / "acme__calc-1" / "mine.txt").write_text("the user's\n")
    again = perfagent(*args, cwd=swe)
    assert again.returncode == 1
    assert again.stderr.splitlines()[0] == ("error: swe.jsonl line 1 (acme__calc-1): imported/acme__calc-1.toml "
                                            "already exists (give --force to replace it)")
    assert (out / "acme__calc-1" / "mine.txt").is_file()
    forced = perfagent(*args, "--force", cwd=swe)
    assert forced.returncode == 1 and "wrote imported/acme__calc-1.toml" in forced.stdout, forced.stdout
    assert not (out / "acme__calc-1" / "mine.txt").exists(), "--force replaces the task's folder"
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "acme__calc-1", "acme__calc-1.toml", "acme__calc-1.reference.diff",
        "acme__calc-2", "acme__calc-2.toml", "acme__calc-2.reference.diff"]), "no temporary folder left"
    load_task(out / "acme__calc-1.toml")


@pytest.mark.slow(seconds=30)
def test_an_imported_gso_test_that_always_fails_on_the_change_checks_as_fail(gso):
    """The runner is the package's, the record only data: a GSO test that raises on every run of the changed
    code is `fail` (a test failing on the unchanged base too is "cannot be checked", never a pass)."""
    raises = ("import inspect\n\nfrom fastpkg import core\n\n\n"
              "def run_test(eqcheck=False, reference=False, prefix=''):\n"
              "    if 'sum(' in inspect.getsource(core):\n        raise RuntimeError('always fails on the change')\n"
              "    return 0.001\n")
    record = json.loads((gso / "gso.jsonl").read_text().splitlines()[1]) | {
        "instance_id": "acme__fastpkg-fails", "prob_script": raises, "install_commands": []}
    (gso / "fails.jsonl").write_text(json.dumps(record) + "\n")
    assert perfagent("tasks", "import", "fails.jsonl", "--format", "gso", "--out", "imported", "--repos", "mirrors",
                     cwd=gso).returncode == 0
    res = perfagent("check", "imported/acme__fastpkg-fails.toml", "--patch", "gold.diff", "--no-perf", "--json",
                    "ev.json", cwd=gso)
    assert (gso / "ev.json").is_file(), res.stdout + res.stderr
    ev = json.loads((gso / "ev.json").read_text())
    assert ev["verdict"] == "fail", (res.returncode, ev["reasons"])
    assert not ev["correctness"]["plain"]["passed"]


# -- GSO's tests run from a repository root, as its harness runs them in /testbed (issue 47) -------------------
# A GSO test that reads the repository's own files through the working folder, and leaves a file there.
CWD_TEST = '''import json
import os

from fastpkg.core import total


def run_test(eqcheck=False, reference=False, prefix=""):
    with open(os.path.join("data", "numbers.txt")) as f:
        data = [int(x) for x in f.read().split()]
    with open("stray-output.txt", "w") as f:
        f.write("a test writes here\\n")
    result = {"total": total(data)}
    if reference:
        with open(f"{prefix}_result.json", "w") as f:
            json.dump(result, f)
    if eqcheck:
        with open(f"{prefix}_result.json") as f:
            assert json.load(f) == result, "not equivalent"
    return 0.01
'''


@pytest.fixture
def gso_cwd(gso):
    """acme/fastpkg with a data file, a GSO record whose test reads it as GSO's do (from the working folder), its
    gold patch and a wrong one."""
    repo = make_repo(gso / "mirrors" / "acme__numfile", {"fastpkg/__init__.py": "", "fastpkg/core.py": SLOW,
                                                         "data/numbers.txt": " ".join(map(str, range(500))) + "\n"})
    base = repo.head.commit.hexsha
    gold = diff(repo, base, commit(repo, {"fastpkg/core.py": FAST}, "core: sum()"))
    repo.git.reset("--hard", base)
    wrong = diff(repo, base, commit(repo, {"fastpkg/core.py": FAST.replace("* rounds", "* (rounds + 1)")}, "wrong"))
    repo.git.reset("--hard", base)
    record = {"instance_id": "acme__numfile-1", "repo": "acme/numfile", "base_commit": base, "gt_diff": gold,
              "api": "fastpkg.core.total", "tests": [CWD_TEST], "install_commands": []}
    (gso / "cwd.jsonl").write_text(json.dumps(record) + "\n")
    (gso / "cwd-gold.diff").write_text(gold)
    (gso / "cwd-wrong.diff").write_text(wrong)
    assert perfagent("tasks", "import", "cwd.jsonl", "--format", "gso", "--out", "imported", "--repos", "mirrors",
                     cwd=gso).returncode == 0
    return gso


def test_the_gso_runner_runs_both_halves_from_a_repository_root_and_leaves_the_checkout_as_it_was(gso_cwd):
    mirror = gso_cwd / "mirrors" / "acme__numfile"
    runner = gso_cwd / "imported" / "acme__numfile-1" / "gso_run.py"
    env = {**os.environ, "PYTHONPATH": str(mirror)}
    for patch, code in (("cwd-gold.diff", 0), ("cwd-wrong.diff", 1)):
        subprocess.run(["git", "apply", str(gso_cwd / patch)], cwd=mirror, check=True)
        res = subprocess.run([sys.executable, str(runner), "check"], cwd=mirror, env=env, capture_output=True,
                             text=True)
        assert res.returncode == code, (patch, res.stdout + res.stderr)
        assert "could not store its result" not in res.stdout, res.stdout
        assert ("FAILED gso_test_0.py - AssertionError: not equivalent" in res.stdout) == (code == 1), res.stdout
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored"], cwd=mirror,
                                capture_output=True, text=True, check=True).stdout
        assert [ln for ln in status.splitlines() if "__pycache__" not in ln] == [" M fastpkg/core.py"], status
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=mirror, check=True)


@pytest.mark.slow(seconds=60)
def test_a_gso_test_that_reads_repository_files_through_the_working_folder_grades_gold_pass_and_wrong_fail(
        gso_cwd):
    """Issue 47's acceptance: on main the base's half ran from a temporary folder, so every check said the task
    cannot be checked."""
    for patch, verdict in (("cwd-gold.diff", "pass"), ("cwd-wrong.diff", "fail")):
        res = perfagent("check", "imported/acme__numfile-1.toml", "--patch", patch, "--no-perf", "--json", "ev.json",
                        cwd=gso_cwd)
        assert (gso_cwd / "ev.json").is_file(), res.stdout + res.stderr
        ev = json.loads((gso_cwd / "ev.json").read_text())
        assert ev["verdict"] == verdict, (patch, res.returncode, ev["reasons"], ev["correctness"])
    # GSO's equivalence message is the reason, and no buffer is blamed: no process imported torch (issue 46)
    assert ev["reasons"] == ["tests fail: gso_test_0.py (AssertionError: not equivalent)"], ev["reasons"]


def test_the_swebench_runner_grades_skipped_and_cut_off_ids_as_swebench_does(tmp_path):
    """SWE-bench's grading (harness/grading.py): a skipped PASS_TO_PASS test is maintained, a skipped FAIL_TO_PASS
    test is no fix, and an id cut off inside its parameters stands for the tests it begins when they agree."""
    tests = ("import sys\n\nimport pytest\n\n\n@pytest.mark.parametrize('x', ['log(photon', 'log(photons)'])\n"
             "def test_cut(x):\n    assert x\n\n\n@pytest.mark.skipif(sys.version_info > (3,), reason='old only')\n"
             "def test_skipped():\n    assert False\n")
    repo = make_repo(tmp_path / "calc", {"calc/__init__.py": "", "tests/test_x.py": tests})
    base = repo.head.commit.hexsha
    record = {"instance_id": "acme__calc-9", "repo": "acme/calc", "base_commit": base, "patch": "",
              "problem_statement": "x", "FAIL_TO_PASS": ["tests/test_x.py::test_cut[log(photon"],
              "PASS_TO_PASS": ["tests/test_x.py::test_skipped"]}
    (tmp_path / "r.jsonl").write_text(json.dumps(record) + "\n")
    (tmp_path / "mirrors").mkdir()
    (tmp_path / "calc").rename(tmp_path / "mirrors" / "calc")
    assert perfagent("tasks", "import", "r.jsonl", "--format", "swebench", "--out", "out", "--repos", "mirrors",
                     cwd=tmp_path).returncode == 0
    mirror, runner = tmp_path / "mirrors" / "calc", tmp_path / "out" / "acme__calc-9" / "swe_check.py"
    commit(git.Repo(mirror), {"calc/fix.py": "FIXED = True\n"}, "a change")  # not the base: F2P is required
    env = {**os.environ, "PYTHONPATH": str(mirror)}
    res = subprocess.run([sys.executable, str(runner)], cwd=mirror, env=env, capture_output=True, text=True)
    assert res.returncode == 0 and "2 of 2 required test(s) passed" in res.stdout, res.stdout + res.stderr
    record |= {"instance_id": "acme__calc-10", "FAIL_TO_PASS": ["tests/test_x.py::test_skipped"], "PASS_TO_PASS": []}
    (tmp_path / "r.jsonl").write_text(json.dumps(record) + "\n")
    assert perfagent("tasks", "import", "r.jsonl", "--format", "swebench", "--out", "out", "--repos", "mirrors",
                     cwd=tmp_path).returncode == 0
    res = subprocess.run([sys.executable, str(tmp_path / "out" / "acme__calc-10" / "swe_check.py")], cwd=mirror,
                         env=env, capture_output=True, text=True)
    assert res.returncode == 1 and "FAILED tests/test_x.py::test_skipped - skipped" in res.stdout, res.stdout

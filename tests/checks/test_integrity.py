"""Test and import integrity on real files: what a patch may not touch (pytest config, conftest,
start-up hooks, shadowing modules), what gets flagged (pytest detection, torch monkeypatching),
and metric lines printed twice."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agent.checks.integrity import (
    IntegrityResult,
    check_integrity,
    collection_violations,
    encoding_violations,
    installed_top_level_modules,
    is_test_path,
    shadowed_modules,
    suspicious_code,
)
from agent.checks.perf import parse_metric


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        f = root / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)


@pytest.fixture
def trees(tmp_path: Path):
    """(base, candidate, apply): two checkouts; apply(base_files, cand_files) writes both, returns the reasons."""
    base, cand = tmp_path / "base", tmp_path / "cand"
    base.mkdir()
    cand.mkdir()

    def apply(before: dict[str, str], after: dict[str, str]) -> list[str]:
        write(base, before)
        write(cand, after)
        return collection_violations(cand, base, sorted(set(before) | set(after)))

    return base, cand, apply


# -- refusals: pytest configuration in every form ------------------------------------------------
@pytest.mark.parametrize("name", ["pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tests/pytest.ini"])
def test_a_dedicated_pytest_config_file_is_refused_wherever_it_is(trees, name):
    reasons = trees[2]({}, {name: "[pytest]\naddopts = -p evil\n"})
    assert reasons == [f"{name}: adds a pytest configuration file"]


def test_changing_or_deleting_an_existing_pytest_ini_is_refused(trees):
    base, cand, apply = trees
    assert apply({"pytest.ini": "[pytest]\n"}, {"pytest.ini": "[pytest]\naddopts = -x\n"}) == [
        "pytest.ini: changes a pytest configuration file"]
    (cand / "pytest.ini").unlink()
    assert collection_violations(cand, base, ["pytest.ini"]) == ["pytest.ini: deletes a pytest configuration file"]


def test_pyproject_is_refused_only_when_its_pytest_tables_change(trees):
    base, cand, apply = trees
    before = '[project]\nname = "x"\nversion = "1"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    elsewhere = before.replace('version = "1"', 'version = "2"') + '\n[tool.ruff]\nline-length = 120\n'
    assert apply({"pyproject.toml": before}, {"pyproject.toml": elsewhere}) == []
    changed = before.replace('"-q"', '"-q -p evil"')
    assert apply({"pyproject.toml": before}, {"pyproject.toml": changed}) == [
        "pyproject.toml: changes [tool.pytest] (pytest configuration)"]
    removed = '[project]\nname = "x"\nversion = "1"\n'
    assert apply({"pyproject.toml": before}, {"pyproject.toml": removed}) == [
        "pyproject.toml: changes [tool.pytest] (pytest configuration)"]


def test_a_native_tool_pytest_table_added_to_pyproject_is_refused(trees):
    reasons = trees[2]({"pyproject.toml": '[project]\nname = "x"\n'},
                       {"pyproject.toml": '[project]\nname = "x"\n\n[tool.pytest]\naddopts = ["-p", "evil"]\n'})
    assert reasons == ["pyproject.toml: changes [tool.pytest] (pytest configuration)"]


def test_a_new_pyproject_without_pytest_tables_is_fine_one_with_them_is_not(tmp_path):
    write(tmp_path, {"sub/pyproject.toml": '[project]\nname = "x"\n',
                     "other/pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-q"\n'})
    assert collection_violations(tmp_path, None, ["sub/pyproject.toml", "other/pyproject.toml"]) == [
        "other/pyproject.toml: changes [tool.pytest] (pytest configuration)"]


def test_a_pytest11_entry_point_in_pyproject_is_refused(trees):
    plugin = '[project.entry-points.pytest11]\nevil = "pkg.evil"\n'
    reasons = trees[2]({"pyproject.toml": '[project]\nname = "x"\n'},
                       {"pyproject.toml": '[project]\nname = "x"\n' + plugin})
    assert reasons == ["pyproject.toml: changes [project.entry-points.pytest11] (pytest configuration)"]


def test_setup_cfg_and_tox_ini_are_refused_only_when_their_pytest_sections_change(trees):
    base, cand, apply = trees
    cfg = "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n"
    assert apply({"setup.cfg": cfg}, {"setup.cfg": cfg.replace("name = x", "name = y") + "# note\n"}) == []
    assert apply({"setup.cfg": cfg}, {"setup.cfg": cfg + "    -p evil\n"}) == [
        "setup.cfg: changes [tool:pytest] (pytest configuration)"]
    tox = "[tox]\nenvlist = py311\n\n[testenv]\ncommands = pytest\n"
    assert apply({"tox.ini": tox}, {"tox.ini": tox.replace("py311", "py312")}) == []
    assert apply({"tox.ini": tox}, {"tox.ini": tox + "\n[pytest]\naddopts = -p evil\n"}) == [
        "tox.ini: changes [pytest] (pytest configuration)"]
    ep = "[options.entry_points]\nconsole_scripts =\n    x = pkg:main\n"
    assert apply({"setup.cfg": ep}, {"setup.cfg": ep.replace("x = ", "y = ")}) == []
    assert apply({"setup.cfg": ep}, {"setup.cfg": ep + "pytest11 =\n    evil = pkg.evil\n"}) == [
        "setup.cfg: changes [options.entry_points] pytest11 (pytest configuration)"]


@pytest.mark.parametrize("name,why", [
    ("conftest.py", "adds a conftest.py (pytest loads it as a plugin)"),
    ("pkg/deep/conftest.py", "adds a conftest.py (pytest loads it as a plugin)"),
    ("sitecustomize.py", "adds sitecustomize (imported at interpreter start-up)"),
    ("lib/usercustomize.py", "adds usercustomize (imported at interpreter start-up)"),
    ("sitecustomize/__init__.py", "adds sitecustomize (imported at interpreter start-up)"),
    ("src/sitecustomize/hook.py", "adds sitecustomize (imported at interpreter start-up)"),
    ("evil.pth", "adds a .pth file (run at interpreter start-up)"),
    ("venv/lib/site-packages/x.pth", "adds a .pth file (run at interpreter start-up)"),
])
def test_conftest_startup_hooks_and_pth_files_are_refused_at_any_depth(tmp_path, name, why):
    write(tmp_path, {name: "import os\n"})
    assert collection_violations(tmp_path, None, [name]) == [f"{name}: {why}"]


def test_an_unchanged_file_and_ordinary_code_are_not_refused(trees):
    assert trees[2]({"conftest.py": "x = 1\n", "pkg/mod.py": "a = 1\n"},
                    {"conftest.py": "x = 1\n", "pkg/mod.py": "a = 2\n"}) == []


# -- refusals: shadowing installed modules --------------------------------------------------------
def test_installed_top_level_modules_asks_the_interpreter_without_cwd_or_pythonpath(tmp_path):
    write(tmp_path, {"zz_only_on_pythonpath.py": ""})
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    names = installed_top_level_modules(sys.executable, env)
    assert {"pytest", "_pytest", "torch", "numpy", "os", "json", "sys", "agent"} <= names
    assert "zz_only_on_pythonpath" not in names
    assert installed_top_level_modules(sys.executable, env) is names  # memoised per (python, PATH)


def test_installed_top_level_modules_says_why_when_the_interpreter_fails(tmp_path):
    with pytest.raises(RuntimeError, match="cannot list the modules"):
        installed_top_level_modules(str(tmp_path / "no-such-python"))


def test_new_top_level_modules_that_shadow_installed_ones_are_refused(tmp_path):
    write(tmp_path, {"pytest.py": "", "torch.py": "", "numpy/__init__.py": "", "tests/json.py": "",
                     "tests/test_a.py": "", "pkg/__init__.py": "", "pkg/json.py": "", "pkg/sub/__init__.py": "",
                     "pkg/helpers.py": "", "mymod.py": ""})
    added = ["mymod.py", "numpy/__init__.py", "pkg/helpers.py", "pkg/json.py", "pkg/sub/__init__.py",
             "pytest.py", "tests/json.py", "torch.py"]
    assert shadowed_modules(tmp_path, added, {"json", "numpy", "pytest", "sub"}) == [
        "numpy/__init__.py: adds a top-level module 'numpy' that shadows the installed one",
        "pytest.py: adds a top-level module 'pytest' that shadows the installed one",
        "tests/json.py: adds a top-level module 'json' that shadows the installed one",
        "torch.py: adds a top-level module 'torch' that shadows the installed one",  # always, even unlisted
    ]


def test_a_module_in_a_test_package_does_not_shadow(tmp_path):
    write(tmp_path, {"tests/__init__.py": "", "tests/json.py": ""})
    assert shadowed_modules(tmp_path, ["tests/json.py"], {"json"}) == []


# -- flags: suspicious non-test code ---------------------------------------------------------------
DETECTS_PYTEST = '''\
"""Mentions PYTEST_CURRENT_TEST in a docstring: not a flag."""
import os
import sys


def under_test():
    a = "pytest" in sys.modules
    b = sys.modules.get("_pytest")
    c = os.environ.get("PYTEST_CURRENT_TEST")
    d = "PYTEST_VERSION" in os.environ
    e = any("pytest" in m for m in sys.argv)
    return a or b or c or d or e


def plain():
    import pytest
    from _pytest.config import Config
    return pytest, Config
'''

PATCHES_TORCH = '''\
import torch
import torch as t
import torch.nn.functional as F
from torch import Tensor, empty


def zeros_like_empty(*a, **k):
    return torch.zeros(*a, **k)


torch.empty = zeros_like_empty
t.Tensor.copy_ = lambda self, src: self
setattr(torch, "empty_like", torch.zeros_like)
setattr(torch.Tensor, "clone", lambda self: self)
F.softmax = None
Tensor.add_ = None
del torch.ones
vars(torch)["full"] = None
empty = zeros_like_empty
x = torch.zeros(3)
x.foo = 1
sys.modules["torch"].zeros, torch.ones_like = None, None
'''


def flags_of(root: Path, files: dict[str, str], protected: tuple[str, ...] = ("tests/**",), **kw) -> list[str]:
    write(root, files)
    return [str(f) for f in suspicious_code(root, sorted(files), lambda p: is_test_path(p, protected), **kw)]


def test_code_that_detects_pytest_is_flagged_line_by_line(tmp_path):
    assert flags_of(tmp_path, {"pkg/mod.py": DETECTS_PYTEST}) == [
        "pkg/mod.py:7: compares with 'pytest': checks whether it runs under pytest",
        "pkg/mod.py:8: passes '_pytest' to sys.modules.get(): checks whether it runs under pytest",
        "pkg/mod.py:9: refers to PYTEST_CURRENT_TEST (set only under pytest)",
        "pkg/mod.py:10: refers to PYTEST_VERSION (set only under pytest)",
        "pkg/mod.py:11: compares with 'pytest': checks whether it runs under pytest",
        "pkg/mod.py:16: imports pytest in non-test code",
        "pkg/mod.py:17: imports from _pytest.config in non-test code",
    ]


def test_assignments_to_torch_attributes_are_flagged_through_aliases(tmp_path):
    assert flags_of(tmp_path, {"pkg/patch.py": PATCHES_TORCH}) == [
        "pkg/patch.py:11: assigns torch.empty (monkeypatches torch for every caller)",
        "pkg/patch.py:12: assigns torch.Tensor.copy_ (monkeypatches torch for every caller)",
        "pkg/patch.py:13: setattr() on torch (monkeypatches torch for every caller)",
        "pkg/patch.py:14: setattr() on torch.Tensor (monkeypatches torch for every caller)",
        "pkg/patch.py:15: assigns torch.nn.functional.softmax (monkeypatches torch for every caller)",
        "pkg/patch.py:16: assigns torch.Tensor.add_ (monkeypatches torch for every caller)",
        "pkg/patch.py:17: deletes torch.ones (monkeypatches torch for every caller)",
        "pkg/patch.py:18: assigns torch['full'] (monkeypatches torch for every caller)",
        "pkg/patch.py:22: assigns torch.zeros (monkeypatches torch for every caller)",
        "pkg/patch.py:22: assigns torch.ones_like (monkeypatches torch for every caller)",
    ]


def test_only_changed_lines_are_flagged_when_given_and_the_tasks_test_files_never(tmp_path):
    files = {"pkg/patch.py": PATCHES_TORCH, "tests/test_x.py": DETECTS_PYTEST}
    assert flags_of(tmp_path, files, lines={"pkg/patch.py": {12, 20}, "tests/test_x.py": {1, 2, 3, 4, 5}}) == [
        "pkg/patch.py:12: assigns torch.Tensor.copy_ (monkeypatches torch for every caller)"]


def test_a_module_named_like_a_test_that_the_task_does_not_own_is_scanned(tmp_path):
    """`pkg/test_y.py` is imported by the package like any module: its name does not make it a test."""
    flags = flags_of(tmp_path, {"pkg/test_y.py": PATCHES_TORCH, "pkg/y_test.py": DETECTS_PYTEST})
    assert any(f.startswith("pkg/test_y.py:") for f in flags) and any(f.startswith("pkg/y_test.py:") for f in flags)


UTF7_HIDDEN = (b"# -*- coding: utf-7 -*-\nimport torch\n"
               b"# harmless +AAo-torch.empty = torch.zeros\n")


def test_a_coding_cookie_is_honoured_and_only_utf8_ascii_latin1_are_accepted(tmp_path):
    """The scan reads what Python runs: a utf-7 cookie hides `torch.empty = torch.zeros` in a 'comment'."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/hidden.py").write_bytes(UTF7_HIDDEN)
    assert "torch.empty = torch.zeros" not in UTF7_HIDDEN.decode().splitlines()[2].split("#")[0]
    flags = [str(f) for f in suspicious_code(tmp_path, ["pkg/hidden.py"], lambda p: False,
                                             lines={"pkg/hidden.py": {3}})]
    # Python's line 4 (the cookie's encoding decodes `+AAo-` into a line break): scanned whole, not by git's lines
    assert flags == ["pkg/hidden.py:4: assigns torch.empty (monkeypatches torch for every caller)"]
    for n, cookie in enumerate(["utf-8", "UTF8", "latin-1", "iso-8859-1", "ascii", "us-ascii"]):
        (tmp_path / f"pkg/ok{n}.py").write_text(f"# -*- coding: {cookie} -*-\nx = 1\n")
    (tmp_path / "pkg/bom.py").write_bytes(b"\xef\xbb\xbfx = 1\n")
    (tmp_path / "pkg/cp.py").write_bytes(b"# coding: cp1252\nx = 1\n")
    (tmp_path / "pkg/bogus.py").write_bytes(b"# coding: no-such-codec\nx = 1\n")
    files = ["pkg/hidden.py", *[f"pkg/ok{n}.py" for n in range(6)], "pkg/bom.py", "pkg/cp.py", "pkg/bogus.py"]
    reasons = encoding_violations(tmp_path, files)
    assert [r.split(":")[0] for r in reasons] == ["pkg/hidden.py", "pkg/cp.py", "pkg/bogus.py"]
    assert "'utf-7'" in reasons[0]
    result = check_integrity(tmp_path, None, files, installed=set(), is_test=lambda p: False)
    assert [r.split(":")[0] for r in result.refused] == ["pkg/hidden.py", "pkg/cp.py", "pkg/bogus.py"]


def test_a_file_whose_lines_end_in_a_lone_cr_is_scanned_whole(tmp_path):
    """git counts one line where Python counts three: the diff's line numbers say nothing about it."""
    (tmp_path / "m.py").write_bytes(b"import torch\rx = 1\rtorch.empty = torch.zeros\r")
    flags = [str(f) for f in suspicious_code(tmp_path, ["m.py"], lambda p: False, lines={"m.py": {1}})]
    assert flags == ["m.py:3: assigns torch.empty (monkeypatches torch for every caller)"]


@pytest.mark.parametrize("name", ["tinypkg-0.1.dist-info/entry_points.txt", "x.egg-info/entry_points.txt",
                                  "src/x.egg-info/PKG-INFO", "lib/y.dist-info/METADATA", "x.egg-link",
                                  "__editable__.x-0.1.pth.py", "__editable___x_finder.py", "pkg/entry_points.txt"])
def test_package_metadata_and_editable_hooks_are_refused_anywhere(tmp_path, name):
    write(tmp_path, {name: "[pytest11]\nx = x\n"})
    reasons = collection_violations(tmp_path, None, [name])
    assert len(reasons) == 1 and reasons[0].startswith(f"{name}: adds ") and "never a patch's" in reasons[0]


def test_a_changed_file_that_does_not_parse_is_flagged(tmp_path):
    assert flags_of(tmp_path, {"pkg/bad.py": "def f(:\n"})[0].startswith("pkg/bad.py:1: not parsed")


def test_is_test_path_is_what_the_task_owns_not_what_a_name_says():
    assert is_test_path("bench/b.py", ["bench/**"]) and is_test_path("tests/util.py", ["tests/**"])
    assert not is_test_path("pkg/test_a.py", ["tests/**"]) and not is_test_path("pkg/a_test.py")
    assert not is_test_path("tests/util.py") and not is_test_path("bench/b.py")


# -- all together ----------------------------------------------------------------------------------
def test_check_integrity_combines_refusals_and_flags(tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    write(base, {"pkg/__init__.py": "", "pkg/mod.py": "x = 1\n"})
    write(cand, {"pkg/__init__.py": "", "pkg/mod.py": "import torch\ntorch.empty = torch.zeros\n",
                 "pytest.py": "", "conftest.py": ""})
    result = check_integrity(cand, base, ["conftest.py", "pkg/mod.py", "pytest.py"], installed={"pytest"},
                             is_test=is_test_path)
    assert result.refused == ["conftest.py: adds a conftest.py (pytest loads it as a plugin)",
                              "pytest.py: adds a top-level module 'pytest' that shadows the installed one"]
    assert [str(f) for f in result.flags] == [
        "pkg/mod.py:2: assigns torch.empty (monkeypatches torch for every caller)"]
    assert result.summary().startswith("integrity: refused (2): conftest.py: adds a conftest.py")
    assert IntegrityResult.model_validate_json(result.model_dump_json()) == result
    assert IntegrityResult().summary() == "integrity: ok"


# -- forged metrics -----------------------------------------------------------------
def test_a_metric_printed_twice_is_two_samples_not_the_last_one():
    """A forged line at exit does not replace the real one; it moves the median, which the outside clock
    then holds to account (tests/redteam)."""
    real = '{"metric": "init_ms", "value": 12.5, "unit": "ms"}'
    forged = '{"metric": "init_ms", "value": 0.001, "unit": "ms"}'
    assert parse_metric(f"{real}\n{forged}\n", "init_ms")[:2] == (6.2505, "ms")
    assert parse_metric(f"{real}\n{forged}\n", "init_ms").lines == 2
    assert parse_metric(f'{real}\n{{"metric": "other", "value": 1}}\n{{"metric": "other", "value": 2}}\n',
                        "init_ms")[:2] == (12.5, "ms")

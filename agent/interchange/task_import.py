"""Tasks in: the instance records of GSO and SWE-bench (JSON lines) as perfagent task files.

`import_record` is the mapping, one record at a time: the task's TOML text and the files that go
beside it, nothing written. `import_records` is the edge: it reads the records file, writes each
task with its files, and holds every one to the validator (`load_task`, `check_task_base`); a
record that fails is reported by name, and the others are still written.

A record's text is data, never code and never a shell command: the checks' scripts are the package's own files
(agent/interchange/runners), copied beside the task with a JSON file of what differs per task; the base commit must be
a sha or a plain ref name; an install command is kept only as a pip install of named packages (import_rules).
A record that breaks one of these is refused whole (`RecordRefused`) and nothing of it is written.

Nothing of the user's is overwritten or lost: each task is written to a temporary folder beside it, validated
there, and only then renamed into place; a task file, folder or reference diff already there refuses the record
unless `force`, and on failure only what the import itself made is removed.

What a task file cannot say is never dropped silently: every field of a record that is not mapped,
and every install command that is not, is named in the task's comments with the reason.

Beside `<out>/<id>.toml` go `<out>/<id>/` (the scripts the task's commands run: the task's `read`
folder, shown read-only in every sandbox, the agent's included) and `<out>/<id>.reference.diff` (the
gold patch, which no sandbox shows). The commands name their scripts by absolute path, since they run
in the checkout: import again after moving the folder.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.interchange import import_rules
from agent.env.workspace import PatchError, check_task_base, patch_paths
from agent.task import TaskError, load_task
from agent.errors import BadInput

FORMATS = ("gso", "swebench", "iso-bench")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_OWNER_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
GSO_METRIC = "gso_time_s"
RUNNERS = Path(__file__).resolve().parent / "runners"  # the checks' scripts, copied beside each task


class RecordsError(BadInput):
    """The records file cannot be read at all (missing, a malformed line): one line, nothing written."""


class RecordError(BadInput):
    """One record that cannot become a task; the message is one line."""


class RecordRefused(RecordError):
    """A record whose text would be run or read as code on this machine (an install command that is not a pip
    install of named packages, a base commit that is not a sha or a ref name, a repository URL git could run or
    read as an option): refused whole."""


@dataclass(frozen=True)
class Imported:
    """One record as a task: its id, the task file's text, and the files beside it (paths relative to
    the output folder -> text)."""

    id: str
    task: str
    files: dict[str, str]
    unmapped: list[str] = field(default_factory=list)


@dataclass
class ImportResult:
    written: list[Path] = field(default_factory=list)  # the task files, each valid
    failed: list[str] = field(default_factory=list)  # one line per record that was not imported
    refused: int = 0  # of those, the records refused as unsafe (RecordRefused)
    records: int = 0


# -- reading ------------------------------------------------------------------------------------
def read_records(path: Path) -> list[tuple[int, dict]]:
    """(line number, record) for every non-blank line; RecordsError on the first that is not a JSON object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RecordsError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordsError(f"{path}: line {n}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise RecordsError(f"{path}: line {n}: not a JSON object (a {type(record).__name__})")
        out.append((n, record))
    if not out:
        raise RecordsError(f"{path}: no records")
    return out


def _str(record: dict, name: str, *, required: bool = True) -> str:
    value = record.get(name)
    if value is None:
        if required:
            raise RecordError(f"{name}: missing")
        return ""
    if not isinstance(value, str):
        raise RecordError(f"{name}: must be a string, not {type(value).__name__}")
    if required and not value.strip():
        raise RecordError(f"{name}: empty")
    return value


def _str_list(record: dict, name: str) -> list[str]:
    """A list of strings, given as a list or (as the published datasets store some) a JSON-encoded one."""
    value = record.get(name)
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise RecordError(f"{name}: a string that is not a JSON-encoded list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{name}: must be a list of strings")
    return value


def _patch_paths(text: str, name: str) -> list[str]:
    try:
        return patch_paths(text)
    except PatchError as e:
        raise RecordError(f"{name}: not a patch git can read ({e})") from None


# -- the repository -------------------------------------------------------------------------------
def resolve_repo(repo: str, repos: Path | None) -> str:
    """A record's `repo` (owner/name, or a git URL) as the task's `repo`: with `repos`, the local mirror
    repos/<owner>__<name>, else repos/<name> (first found); without, the URL (owner/name is GitHub's)."""
    repo = repo.strip()
    url = "://" in repo or repo.startswith("git@")
    if not url and not _OWNER_NAME.match(repo):
        raise RecordError(f"repo: {repo!r} is neither owner/name nor a git URL")
    if repos is None:
        try:
            return import_rules.repo_url(repo) if url else f"https://github.com/{repo}"
        except ValueError as e:
            raise RecordRefused(str(e)) from None
    parts = re.split(r"[/:]", repo.removesuffix("/").removesuffix(".git"))
    owner, name = parts[-2], parts[-1]
    tried = [repos / f"{owner}__{name}", repos / name]
    for folder in tried:
        if folder.is_dir():
            return str(folder.resolve())
    raise RecordError(f"repo: no mirror of {owner}/{name} in {repos} (looked for {', '.join(p.name for p in tried)})")


# -- TOML, written by hand: strings, lists of strings, numbers ----------------------------------------
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # tab and newline stay


def toml_str(s: str) -> str:
    """A TOML string: basic on one line, multi-line basic (readable) for text with newlines."""
    if "\n" not in s:
        return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")
    body = s.replace("\\", "\\\\").replace('"""', '""\\"')
    body = _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", body)
    return '"""\n' + body + ("" if body.endswith("\n") else "\n") + '"""'


def toml_list(items: list[str]) -> str:
    one = "[" + ", ".join(toml_str(i) for i in items) + "]"
    if len(one) <= 100:
        return one
    return "[\n" + "".join(f"    {toml_str(i)},\n" for i in items) + "]"


def _comment(text: str) -> str:
    return " ".join(text.split())


# -- one record -> one task --------------------------------------------------------------------------
@dataclass
class _Draft:
    """What the mappers fill in; `render` turns it into the task file."""

    header: list[str]
    top: dict[str, str]  # key -> TOML value, in order
    tables: dict[str, dict[str, str]]
    files: dict[str, str]
    unmapped: list[str]

    def render(self) -> str:
        lines = [f"# {_comment(h)}" for h in self.header]
        lines += [f"# not mapped: {_comment(u)}" for u in self.unmapped]
        lines += [f"{k} = {v}" for k, v in self.top.items()]
        for name, table in self.tables.items():
            if table:
                lines += ["", f"[{name}]", *(f"{k} = {v}" for k, v in table.items())]
        return "\n".join(lines) + "\n"


def import_record(record: dict, fmt: str, *, out: Path, repos: Path | None = None, source: str = "") -> Imported:
    """The task for one record of `fmt` ("gso" or "swebench"), its files to be written under `out`
    (which the task's commands name by absolute path); RecordError when the record cannot be one."""
    if fmt not in FORMATS:
        raise RecordError(f"unknown format {fmt!r}")
    task_id = _str(record, "instance_id")
    if not _ID.match(task_id):
        raise RecordError(f"instance_id: {task_id!r} cannot be a task id ([A-Za-z0-9][A-Za-z0-9._-]*)")
    mapper = {"gso": _gso, "swebench": _swebench, "iso-bench": _iso_bench}[fmt]
    draft = mapper(record, task_id, out.resolve(), repos, source)
    return Imported(id=task_id, task=draft.render(), files=draft.files, unmapped=draft.unmapped)


def _unknown(record: dict, known: set[str], fmt: str) -> list[str]:
    return [f"{k} (not a field of the published {fmt} records)" for k in record if k not in known]


def _head(fmt: str, task_id: str, source: str) -> list[str]:
    return [f"Imported by `perfagent tasks import --format {fmt}` from {source or 'a record'}: instance {task_id}.",
            f"Beside it: {task_id}/ (the scripts its commands run; its `read` folder, which every sandbox shows, "
            f"the agent's too) and {task_id}.reference.diff (the gold patch, which no sandbox shows)."]


def _common(record: dict, task_id: str, repos: Path | None, gold: str, gold_field: str) -> tuple[dict, dict]:
    """top-level keys and the [reference] table shared by both formats."""
    repo = resolve_repo(_str(record, "repo"), repos)
    base = _base(record)
    top = {"id": toml_str(task_id), "title": "", "repo": toml_str(repo), "base": toml_str(base)}
    reference = {}
    if gold.strip():
        _patch_paths(gold, gold_field)
        reference["patch"] = toml_str(f"{task_id}.reference.diff")
    return top, reference


# GSO: https://github.com/gso-bench/gso (the harness README lists the fields; build_dataset.py writes them)
GSO_FIELDS = {"instance_id", "repo", "base_commit", "opt_commit", "api", "prob_script", "tests", "hints_text",
              "setup_commands", "install_commands", "created_at", "gt_commit_message", "gt_diff", "arch",
              "instance_image_tag"}
_GSO_WHY = {
    "opt_commit": "the expert commit; its diff, gt_diff, is the reference patch",
    "hints_text": "the expert commit's message: the answer, which GSO does not show the agent either",
    "gt_commit_message": "the expert commit's message: the answer",
    "created_at": "when the expert commit was made",
    "arch": "the machine GSO ran it on: perfagent measures on this one",
    "instance_image_tag": "GSO's Docker image: perfagent runs the checkout in its own sandbox",
    "setup_commands": "the machine's own set-up (system packages, tools): do it on this machine before a run",
}


def _base(record: dict) -> str:
    try:
        return import_rules.base_ref(_str(record, "base_commit").strip())
    except ValueError as e:
        raise RecordRefused(str(e)) from None


def _runner(name: str, task_id: str, settings: dict) -> dict[str, str]:
    """The runner `name` (a file of agent/interchange/runners, as it is) and its settings beside it, as JSON."""
    text = (RUNNERS / name).read_text(encoding="utf-8")
    data = json.dumps({"instance": task_id, **settings}, indent=1, ensure_ascii=False) + "\n"
    return {f"{task_id}/{name}": text, f"{task_id}/{Path(name).stem}.json": data}


def _venv_list(kept: list[tuple[int, str, list[str]]]) -> str:
    """`[setup] venv`: each command as the argv that was checked, a comment above it naming the record's own."""
    lines = ["["]
    for i, cmd, argv in kept:
        lines += [f"    # from the record's install_commands[{i}]: {_comment(cmd)}",
                  f"    {toml_str(shlex.join(argv))},"]
    return "\n".join(lines) + "\n]"


def _install_step(cmd: str) -> tuple[str, str | None]:
    """("venv", None): a `[setup] venv` command; ("python", version) from `uv venv --python X`; or
    ("skip", why) for a command perfagent does itself or cannot run where venv commands run. A "venv" command
    is kept only if import_rules.install_argv passes it; a skipped one is never run, only named."""
    words = cmd.split()
    first = words[0] if words else ""
    if re.match(r"^(uv venv|python3?(\.\d+)? -m venv|virtualenv)\b", cmd):
        m = re.search(r"--python[ =](\S+)", cmd)
        if m and "uv venv" in cmd:
            return "python", m.group(1)
        return "skip", "perfagent makes the venv itself, from [setup] python"
    if first in ("source", ".") and "activate" in cmd:
        return "skip", "perfagent's venv is the active one in every command"
    if re.match(r"^(which python|python3? --version|(uv )?pip (show|list|freeze))\b", cmd):
        return "skip", "only prints"
    checkout = (first in ("git", "cd", "make", "cmake", "cargo", "maturin") or first.startswith("./")
                or "setup.py" in cmd or any(w in ("-r", "--requirement") or w.startswith("-r") for w in words[1:])
                or any(w in (".", "-e.") or w.startswith((".[", "./")) for w in words[1:]))
    if checkout:
        return "skip", ("builds or installs the checkout itself: venv commands run once per machine in the task's "
                        "folder, and the checks import the package from the checkout's source instead (PYTHONPATH), "
                        "so a package that must be compiled is not supported")
    return "venv", None


def _gso(record: dict, task_id: str, out: Path, repos: Path | None, source: str) -> _Draft:
    gold = _str(record, "gt_diff", required=False)
    top, reference = _common(record, task_id, repos, gold, "gt_diff")
    prob = _str(record, "prob_script", required=False)
    tests = _str_list(record, "tests")
    api = _str(record, "api", required=False).strip()
    if not tests and not prob.strip():
        raise RecordError("neither tests nor prob_script: nothing to check or measure")
    unmapped = [f"{k} ({why})" for k, why in _GSO_WHY.items() if k in record]
    unmapped += _unknown(record, GSO_FIELDS, "GSO")
    if not gold.strip():
        unmapped.append("gt_diff (empty: the task has no reference patch)")

    folder = out / task_id
    files: dict[str, str] = {}
    if tests:
        scripts = [f"gso_test_{i}.py" for i in range(len(tests))]
        files |= {f"{task_id}/{s}": t for s, t in zip(scripts, tests)}
        if prob.strip():
            files[f"{task_id}/prob_script.py"] = prob
    else:
        scripts = ["prob_script.py"]
        files[f"{task_id}/prob_script.py"] = prob
    files |= _runner("gso_run.py", task_id, {"base": _base(record), "scripts": scripts, "metric": GSO_METRIC})
    runner = shlex.quote(str(folder / "gso_run.py"))

    python, venv = None, []
    for i, cmd in enumerate(_str_list(record, "install_commands")):
        kind, what = _install_step(cmd.strip())
        try:
            if kind == "python":
                python = import_rules.interpreter(what or "")
            elif kind == "venv":
                venv.append((i, cmd.strip(), import_rules.install_argv(cmd.strip())))
        except ValueError as e:
            why = str(e) if kind == "venv" else f"install command not allowed: `{import_rules.one_line(cmd)}` ({e})"
            raise RecordRefused(why) from None
        if kind == "skip" and cmd.strip():
            unmapped.append(f"install_commands: `{cmd.strip()}` ({what})")

    shown = prob if prob.strip() else tests[0]
    repo_name = _str(record, "repo").strip()
    title = f"{repo_name}: speed up {api}" if api else f"{repo_name}: speed up the workload of GSO's performance test"
    top["title"] = toml_str(title)
    prompt = (f"Make this workload of {repo_name} run faster" + (f" (the API: `{api}`)" if api else "")
              + ", with results that stay identical. The script shows the usage; what `run_test` times is "
              "what counts.\n\n```python\n" + shown.rstrip() + "\n```\n\n"
              "Improve the repository's code for this kind of usage in general, not only for these inputs. "
              f"Measure with `python {runner} perf` (metric `{GSO_METRIC}`, seconds, lower is better); "
              f"`python {runner} check` compares every test's result with the unchanged base's.\n")
    top["prompt"] = toml_str(prompt)
    top["read"] = toml_list([task_id])
    setup = {}
    if python:
        setup["python"] = toml_str(python)
    if venv:
        setup["venv"] = _venv_list(venv)
    header = _head("gso", task_id, source) + [
        f"[correctness] runs GSO's tests ({', '.join(scripts)}) with their equivalence check against the base's "
        "results; [perf] sums their times."]
    tables = {
        "setup": setup,
        "correctness": {"command": toml_str(f"python {runner} check")},
        "perf": {"command": toml_str(f"python {runner} perf"), "metric": toml_str(GSO_METRIC),
                 "direction": toml_str("lower")},
        "reference": reference,
    }
    if gold.strip():
        files[f"{task_id}.reference.diff"] = gold
    return _Draft(header, top, tables, files, unmapped)


# SWE-bench: https://huggingface.co/datasets/princeton-nlp/SWE-bench (the dataset card lists the fields)
SWEBENCH_FIELDS = {"instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
                   "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit"}
_SWE_WHY = {
    "hints_text": "comments on the issue before the fix; SWE-bench's prompts leave them out",
    "created_at": "when the pull request was made",
    "version": "SWE-bench's harness builds the environment from its own specs per repo and version: set "
               "[setup] python to an interpreter with the repo's dependencies",
    "environment_setup_commit": "the commit SWE-bench installs the environment from: see version",
}

def _swebench(record: dict, task_id: str, out: Path, repos: Path | None, source: str) -> _Draft:
    gold = _str(record, "patch", required=False)
    top, reference = _common(record, task_id, repos, gold, "patch")
    statement = _str(record, "problem_statement")
    f2p, p2p = _str_list(record, "FAIL_TO_PASS"), _str_list(record, "PASS_TO_PASS")
    if not f2p and not p2p:
        raise RecordError("FAIL_TO_PASS and PASS_TO_PASS: both empty, nothing to check")
    test_patch = _str(record, "test_patch", required=False)
    setup_paths = _patch_paths(test_patch, "test_patch") if test_patch.strip() else []
    unmapped = [f"{k} ({why})" for k, why in _SWE_WHY.items() if k in record]
    unmapped += _unknown(record, SWEBENCH_FIELDS, "SWE-bench")
    if not gold.strip():
        unmapped.append("patch (empty: the task has no reference patch)")
    odd = [t for t in f2p + p2p if not t.split("::")[0].endswith(".py")]
    if odd:
        unmapped.append(f"test ids that are not pytest node ids (path.py::name), which pytest will not find: "
                        f"{', '.join(odd[:5])}{' ...' if len(odd) > 5 else ''}")

    folder = out / task_id
    files = _runner("swe_check.py", task_id, {"base": _base(record), "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
                                               "setup_paths": setup_paths})
    first = next((ln.strip() for ln in statement.splitlines() if ln.strip()), task_id)
    top["title"] = toml_str(first[:100])
    top["prompt"] = toml_str(statement.rstrip() + f"\n\n(SWE-bench instance {task_id}: resolve the issue above. "
                             "The checks apply the instance's test patch and run its FAIL_TO_PASS and PASS_TO_PASS "
                             "tests.)\n")
    top["protected"] = toml_list(setup_paths)
    top["read"] = toml_list([task_id])
    setup = {}
    if test_patch.strip():
        files[f"{task_id}/test.patch"] = test_patch
        setup["command"] = toml_str(f"git apply --whitespace=nowarn {shlex.quote(str(folder / 'test.patch'))}")
    header = _head("swebench", task_id, source) + [
        "[setup] applies the test patch in every checkout the checks make (the agent's own workspace does not "
        "get it: SWE-bench hides it too, but it is in the `read` folder); [correctness] runs FAIL_TO_PASS + "
        "PASS_TO_PASS with pytest; no [perf]: SWE-bench records have no benchmark."]
    tables = {"setup": setup,
              "correctness": {"command": toml_str(f"python {shlex.quote(str(folder / 'swe_check.py'))}")},
              "reference": reference}
    if gold.strip():
        files[f"{task_id}.reference.diff"] = gold
    return _Draft(header, top, tables, files, unmapped)


# ISO-Bench: https://github.com/thekernelcompany/OmniPerf-Bench (ISO-Bench/tasks/*.yaml), read by iso_bench.py
ISO_FIELDS = {"id", "name", "description", "repo", "runner", "env_build", "optimization_contract", "agents",
              "testpack", "metrics", "scoring", "instance_id", "human_commit", "pre_commit"}
_ISO_WHY = {
    "env_build": "ISO-Bench builds its environment from a Dockerfile or requirements file: set [setup] python to "
                 "an interpreter with the repository's dependencies",
    "agents": "ISO-Bench's per-agent settings (steps, budgets): perfagent's run options say these",
    "testpack": "ISO-Bench's TestPack lives outside the config: [correctness] runs the perf command (plain and "
                "poisoned); give it the repository's own tests for more",
    "scoring": "ISO-Bench's ranking of its metrics: perfagent's verdict comes from its own checks",
}
_THROUGHPUT = re.compile(r"throughput|per_s|tok|qps|rps", re.IGNORECASE)


def _iso_records(path: Path) -> list[tuple[int, dict]]:
    from agent.interchange.iso_bench import ConfigError, read_configs

    try:
        return list(enumerate((record for _where, record in read_configs(path)), 1))
    except ConfigError as e:
        raise RecordsError(str(e)) from None


def _table(record: dict, name: str) -> dict:
    value = record.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"{name}: must be a mapping, not {type(value).__name__}")
    return value


def _git(mirror: str, *args: str) -> str:
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    res = subprocess.run(["git", "-C", mirror, *args], capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise RecordError(f"git {args[0]} in {mirror}: {import_rules.one_line(res.stderr.strip()) or 'failed'}")
    return res.stdout


def _iso_bench(record: dict, task_id: str, out: Path, repos: Path | None, source: str) -> _Draft:
    """One (human commit, its parent) pair of an ISO-Bench config: the repository at the parent, the human commit's
    diff as [reference] (read from the mirror, so only with --repos), its target files as `focus`, its
    `runtime:*` metric's command as the bench (run by iso_bench_run.py, which reads it from JSON)."""
    repo_t, runner_t = _table(record, "repo"), _table(record, "runner")
    contract, unmapped = _table(record, "optimization_contract"), []
    url = _str(repo_t, "url")
    repo = resolve_repo(url, repos)
    human = _str(record, "human_commit").strip().lower()
    if not re.fullmatch(r"[0-9a-f]{40}", human):
        raise RecordRefused(f"repo.human_commit: {import_rules.one_line(human)!r} is not a 40-hex commit sha")
    local = repos is not None
    pre = _str(record, "pre_commit", required=False).strip()
    if pre:
        try:
            pre = import_rules.base_ref(pre)
        except ValueError as e:
            raise RecordRefused(str(e).replace("base_commit", "repo.pre_commit")) from None
    elif local:
        pre = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{human}^1^{{commit}}").strip()
    else:
        raise RecordError("repo.pre_commit: omitted (ISO-Bench then takes the human commit's first parent), which "
                          "only a mirror can say: give --repos DIR")
    top = {"id": toml_str(task_id), "title": "", "repo": toml_str(repo), "base": toml_str(pre)}
    files: dict[str, str] = {}
    reference: dict[str, str] = {}
    if local:
        gold = _git(repo, "diff", "--no-ext-diff", "--no-textconv", "--binary", pre, human, "--")
        if gold.strip():
            _patch_paths(gold, "the human commit's diff")
            files[f"{task_id}.reference.diff"] = gold
            reference["patch"] = toml_str(f"{task_id}.reference.diff")
    else:
        unmapped.append(f"repo.human_commit {human} (its diff is the reference patch; without --repos it is not "
                        "read: import with a mirror to grade against it)")

    targets = _str_list(contract, "target_files")
    constraints = _str_list(contract, "constraints")
    runtime = [m for m in (record.get("metrics") or []) if isinstance(m, dict)
               and str(m.get("using", "")).startswith("runtime:")]
    for m in record.get("metrics") or []:
        if isinstance(m, dict) and m not in runtime[:1]:
            unmapped.append(f"metrics: {m.get('name')!s} ({m.get('using')!s}: "
                            + ("only the first runtime metric is the bench)" if m in runtime else
                               "a TestPack comparison of outputs, which the config does not carry)"))
    if not runtime:
        raise RecordError("metrics: no runtime:* metric (its args.cmd is the bench): nothing to measure")
    metric = runtime[0]
    args = metric.get("args") if isinstance(metric.get("args"), dict) else {}
    cmd = _str(args, "cmd")
    try:
        argv = shlex.split(cmd)
    except ValueError:
        raise RecordError(f"metrics: {metric.get('name')}: args.cmd is not a command line (an unclosed quote)"
                          ) from None
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(metric.get("name") or "iso_metric"))
    direction = "higher" if _THROUGHPUT.search(f"{name} {metric.get('using')}") else "lower"
    for k in ("warmups", "trials", "duration_s"):
        if k in args:
            unmapped.append(f"metrics: {name}: args.{k} = {args[k]!s} (perfagent repeats the bench itself, in fresh "
                            "processes, until its statistics settle)")
    folder = out / task_id
    files |= _runner("iso_bench_run.py", task_id, {"metric": name, "argv": argv})
    runner = shlex.quote(str(folder / "iso_bench_run.py"))

    for k, why in _ISO_WHY.items():
        if k in record:
            unmapped.append(f"{k} ({why})")
    for k in ("cuda_version", "python_version", "platform", "allow_network_during_prepare", "allowed_env"):
        if runner_t.get(k) not in (None, [], ""):
            unmapped.append(f"runner.{k} = {runner_t[k]!s} (the machine ISO-Bench ran on: perfagent's checks run in "
                            "its own sandbox, without network)")
    if contract.get("strict_targets"):
        unmapped.append("optimization_contract.strict_targets (ISO-Bench refuses changes outside the targets: "
                        "perfagent's `focus` only points at them)")
    unmapped += _unknown({k: v for k, v in record.items()}, ISO_FIELDS, "ISO-Bench")
    requires_gpu = runner_t.get("requires_gpu")
    if requires_gpu is not None and not isinstance(requires_gpu, bool):
        raise RecordError(f"runner.requires_gpu: must be true or false, not {requires_gpu!r}")

    title = str(record.get("name") or "").strip() or f"{url}: speed up"
    top["title"] = toml_str(import_rules.one_line(title)[:100] + f" ({human[:8]})")
    description = str(record.get("description") or "").strip()
    prompt = (f"{description or 'Make the repository faster.'}\n\n"
              f"(ISO-Bench task {record.get('id')!s}, human commit {human}: make the code faster with results "
              "that stay the same.)\n"
              + ("\nTarget files:\n" + "".join(f"- {t}\n" for t in targets) if targets else "")
              + ("\nConstraints:\n" + "".join(f"- {c}\n" for c in constraints) if constraints else "")
              + f"\nMeasure with `python {runner} perf` (metric `{name}`, {direction} is better).\n")
    top["prompt"] = toml_str(prompt)
    if targets:
        top["focus"] = toml_list(targets)
    if requires_gpu is not None:
        top["requires_gpu"] = "true" if requires_gpu else "false"
    top["read"] = toml_list([task_id])
    header = _head("iso-bench", task_id, source) + [
        f"One commit pair of ISO-Bench's config {record.get('id')!s}: the base is {pre}, the parent of the human "
        f"commit {human}; [perf] runs the config's {name} command; [correctness] runs it too (plain and "
        "poisoned): ISO-Bench's TestPack is not in the config."]
    tables = {
        "correctness": {"command": toml_str(f"python {runner} check")},
        "perf": {"command": toml_str(f"python {runner} perf"), "metric": toml_str(name),
                 "direction": toml_str(direction)},
        "reference": reference,
    }
    return _Draft(header, top, tables, files, unmapped)


# -- the edge: write, validate, report --------------------------------------------------------------------
def _targets(task_id: str, out: Path) -> list[Path]:
    """Every name in `out` an import of `task_id` writes (or replaces)."""
    return [out / f"{task_id}.toml", out / task_id, out / f"{task_id}.reference.diff"]


def write_task(imported: Imported, out: Path, *, force: bool = False) -> Path:
    """Write the task and its files under `out`, validated first (the task schema, its repo and base commit) in
    a temporary folder beside them, then renamed into place. A task file, folder or reference diff of the same
    name already there is a RecordError naming it, unless `force` (then it is replaced once the new one is
    valid). TaskError when the task is not valid: nothing under `out` changed."""
    targets = _targets(imported.id, out)
    there = [t for t in targets if os.path.lexists(t)]
    if there and not force:
        raise RecordError(f"{there[0]} already exists (give --force to replace it)")
    stage = Path(tempfile.mkdtemp(prefix=f".{imported.id}.", suffix=".import", dir=out))
    new, old, done = stage / "new", stage / "old", False
    try:
        for rel, text in imported.files.items():
            path = new / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        (new / f"{imported.id}.toml").write_text(imported.task, encoding="utf-8")
        check_task_base(load_task(new / f"{imported.id}.toml"))
        _move_in(new, old, targets, force=force)
        done = True
    finally:
        shutil.rmtree(new, ignore_errors=True)
        if done or not (old.is_dir() and any(old.iterdir())):  # never what could not be put back
            shutil.rmtree(stage, ignore_errors=True)
    return targets[0]


def _place(src: Path, target: Path) -> None:
    """Rename a file onto `target`, never replacing one there: a hard link fails on a name that exists."""
    try:
        os.link(src, target)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links
        if os.path.lexists(target):
            raise FileExistsError(f"{target} already exists") from None
        os.rename(src, target)


def _move_in(new: Path, old: Path, targets: list[Path], *, force: bool) -> None:
    """Rename what `new` holds onto `targets` (the task file last: it is what makes the folder a task). With
    `force`, what is there is moved to `old` first and put back if a rename fails; without, a name that
    appeared meanwhile is never replaced (a file is linked, which fails on one that exists)."""
    old.mkdir()
    aside: list[tuple[Path, Path]] = []
    made: list[Path] = []
    try:
        for target in targets[1:] + targets[:1]:
            if force and os.path.lexists(target):
                os.rename(target, old / target.name)
                aside.append((old / target.name, target))
            src = new / target.name
            if src.is_dir():
                target.mkdir()  # FileExistsError if one appeared
                made.append(target)
                for child in src.iterdir():
                    os.rename(child, target / child.name)
            elif src.exists():
                _place(src, target)
                made.append(target)
    except OSError:
        for path in reversed(made):  # only what this import made
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        for src, target in aside:
            os.rename(src, target)
        raise


def import_records(path: Path, fmt: str, out: Path, repos: Path | None = None,
                   on_task: Callable[[Path, Imported], None] = lambda _p, _i: None, *,
                   force: bool = False) -> ImportResult:
    """Every record of `path` as a task in `out`. RecordsError (nothing written) when the file cannot be
    read or a line is not a JSON object; a record that cannot be a task is one line in `failed` (and counted
    in `refused` when it was refused as unsafe). `force`: replace a task of the same name."""
    if fmt not in FORMATS:
        raise RecordsError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    if repos is not None and not repos.is_dir():
        raise RecordsError(f"--repos {repos}: no such folder")
    records = _iso_records(path) if fmt == "iso-bench" else read_records(path)
    result = ImportResult(records=len(records))
    seen: set[str] = set()
    for n, record in records:
        name = record.get("instance_id")
        where = f"{path} line {n}" + (f" ({name})" if isinstance(name, str) and name else "")
        try:
            imported = import_record(record, fmt, out=out, repos=repos, source=f"{path.name} line {n}")
            if imported.id in seen:
                raise RecordError(f"instance_id: {imported.id} again (an earlier line has it)")
            seen.add(imported.id)
            out.mkdir(parents=True, exist_ok=True)
            task_file = write_task(imported, out, force=force)
        except (RecordError, TaskError) as e:
            result.failed.append(f"{where}: {e}")
            result.refused += isinstance(e, RecordRefused)
            continue
        except (OSError, UnicodeError) as e:
            result.failed.append(f"{where}: cannot write: {getattr(e, 'strerror', None) or e}")
            continue
        result.written.append(task_file)
        on_task(task_file, imported)
    return result

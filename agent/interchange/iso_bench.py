"""ISO-Bench's files, read as data: its task configs (YAML) and its run folders.

ISO-Bench (the `ISO-Bench/` folder of github.com/thekernelcompany/OmniPerf-Bench) describes a task by a YAML
config (`tasks/sglang.yaml`: `repo.url`, `repo.human_commit`, an optional `repo.pre_commit` that defaults to
the human commit's first parent, `runner.requires_gpu`, `optimization_contract.target_files`, `metrics`), and
keeps each agent's attempt in `state/runs/<repo>/<agent>/<model>/<timestamp>/<item>/`: `model_patch.diff`,
`prediction.jsonl` (SWE-bench's three fields; its `instance_id` is a worktree path), `task.txt` (the prompt),
`run_summary.json` / `journal.json` (the commits, the agent, the model; where ISO-Bench's evaluator ran, its own
hard metrics: run_summary.json's `evaluation`, or `test_results.json`) and the agent's own output
(`claude_code_stdout.txt`: Claude Code's headless result JSON, with its final message and its cost).

`read_configs` turns a config file into records, one per commit pair, for task_import; `read_run_folder` turns a
run folder into predictions (agent.interchange.predictions) that name the task the import made
(`<config id>-<human commit's first 8 hex>`), each carrying the agent's own claim and cost as `agent_result`.
Nothing here runs or imports anything a file names.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from agent.interchange.predictions import Prediction, PredictionsError
from agent.util.text import strip_controls
from agent.errors import BadInput

__all__ = ["ConfigError", "hard_metrics", "read_configs", "read_run_folder", "task_id", "is_run_folder"]

_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHORT = re.compile(r"_([0-9a-f]{7,40})$")
_NOT_ID = re.compile(r"[^A-Za-z0-9._-]+")
RESULT_FILES = ("claude_code_stdout.txt", "claude_code_result.json", "result.json")
_ITEM = re.compile(r"^(?P<repo>[A-Za-z0-9]+)_\d+_(?P<sha>[0-9a-f]{7,40})$")


@dataclass(frozen=True)
class Shipped:
    """A task shipped with perfagent that answers for an ISO-Bench instance: its id, and the folder ISO-Bench's
    patches name that the task's tree does not have (SGLang's `python/`: the shipped tree is the package's)."""

    task: str
    strip: str = ""


# ISO-Bench instances (the human commit's first 8 hex) -> the shipped task that answers for them.
SHIPPED = {"205d5cb4": Shipped("sglang-fa-cuda-graph", strip="python/")}


class ConfigError(BadInput):
    """A config file that cannot be read at all: one line."""


def task_id(config_id: str, human: str) -> str:
    """The task an ISO-Bench (config, human commit) pair becomes: `<config id>-<first 8 hex>`."""
    name = _NOT_ID.sub("_", config_id.strip()).strip("._-") or "iso"
    return f"{name}-{human[:8].lower()}"


def read_configs(path: Path) -> list[tuple[str, dict]]:
    """(where, record) for each commit pair of each config in a YAML file (one config, a list of them, or several
    YAML documents). A record is the config with `instance_id`, `human_commit` and `pre_commit` set at the top;
    ConfigError when the file is not YAML or holds no config."""
    import yaml

    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{at}") from None
    configs: list[tuple[str, object]] = []
    for n, doc in enumerate(docs, 1):
        items = doc if isinstance(doc, list) else [doc]
        for k, item in enumerate(items, 1):
            where = f"document {n}" + (f" item {k}" if isinstance(doc, list) else "")
            if item is not None:
                configs.append((where, item))
    if not configs:
        raise ConfigError(f"{path}: no task config in it")
    out = []
    for where, config in configs:
        if not isinstance(config, dict):
            raise ConfigError(f"{path}: {where}: not a mapping (a {type(config).__name__})")
        out += [(where, record) for record in _pairs(config)]
    return out


def _pairs(config: dict) -> list[dict]:
    """The config once per human commit (`repo.human_commit`: one sha, or a list of them); a record that cannot be
    one keeps what is wrong for the importer to name (its instance_id says which)."""
    repo = config.get("repo") if isinstance(config.get("repo"), dict) else {}
    humans = repo.get("human_commit")
    humans = humans if isinstance(humans, list) else [humans]
    pre = repo.get("pre_commit")
    cid = str(config.get("id") or "iso")
    out = []
    for human in humans:
        text = str(human).strip() if human is not None else ""
        record = dict(config)
        record["instance_id"] = task_id(cid, text if _SHA.match(text.lower()) else "")  # the importer refuses it
        record["human_commit"] = text
        record["pre_commit"] = str(pre).strip() if pre and len(humans) == 1 else ""
        out.append(record)
    return out


# -- run folders ---------------------------------------------------------------------------------------------
def is_run_folder(path: Path) -> bool:
    """A folder (not a predictions file) holding at least one ISO-Bench item folder."""
    return path.is_dir() and next(_items(path), None) is not None


def _items(root: Path):
    for patch in sorted(root.rglob("model_patch.diff")) + sorted(root.rglob("prediction.jsonl")):
        yield patch.parent


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _prediction_line(folder: Path) -> dict:
    try:
        lines = [ln for ln in (folder / "prediction.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]
        record = json.loads(lines[0]) if lines else {}
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def agent_result(folder: Path) -> dict:
    """The agent's own result JSON in an item folder (Claude Code's headless `result` object): its final message as
    the claim and its cost as self-reported; {} when the folder has none."""
    for name in RESULT_FILES:
        data = _json(folder / name)
        if data.get("type") == "result" or "total_cost_usd" in data or "result" in data:
            cost = data.get("total_cost_usd")
            return {"claim": str(data.get("result") or ""), "file": name, "cost": "self-reported",
                    "cost_usd": float(cost) if isinstance(cost, (int, float)) else None,
                    "num_turns": data.get("num_turns"), "is_error": data.get("is_error")}
    return {}


# ISO-Bench's own hard metrics of an item, as its evaluator writes them: run_summary.json's `evaluation`, or
# test_results.json's `result` (the same fields, `error_message` for `error`). Numbers in ms, speedup > 1 is better.
HARD_NUMBERS = ("baseline_ms", "patched_ms", "speedup")
_STATUS = re.compile(r"^[A-Za-z0-9_. -]{1,40}$")


def hard_metrics(summary: dict, folder: Path) -> dict[str, float | bool | str]:
    """ISO-Bench's own measurement of the item, when the folder carries one: `status` ("success",
    "baseline_failed", ...), `baseline_ms`, `patched_ms`, `speedup`, `improvement`, `error`. Untrusted: a field is
    kept only when it has its type (a finite positive number, a boolean, a short word, an error's first line);
    {} when there is none."""
    own = summary.get("evaluation")
    if not isinstance(own, dict):
        result = _json(folder / "test_results.json").get("result")
        own = dict(result, error=result.get("error_message")) if isinstance(result, dict) else {}
    out: dict[str, float | bool | str] = {}
    status = own.get("status")
    if isinstance(status, str) and _STATUS.match(status.strip()):
        out["status"] = status.strip()
    for name in HARD_NUMBERS:
        v = own.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out[name] = float(v)
    if isinstance(own.get("improvement"), bool):
        out["improvement"] = own["improvement"]
    error = own.get("error")
    if isinstance(error, str) and error.strip():
        out["error"] = strip_controls(error.strip().splitlines()[0])[:200]
    return out


def strip_prefix(patch: str, prefix: str) -> str:
    """`patch` with `prefix` taken off the paths its file headers name (never a line of a hunk's body)."""
    out, in_hunk = [], False
    heads = ("diff --git ", "--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ")
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
        if not in_hunk and line.startswith(heads):
            for side in ("a/", "b/", ""):
                line = line.replace(f" {side}{prefix}", f" {side}")
        out.append(line)
    return "".join(out)


def read_run_folder(root: Path, task_ids: Collection[str] | None = None) -> list[Prediction]:
    """One prediction per item folder under `root` (a run folder at any level: the whole `state/runs`, one agent,
    one timestamp or one item). Its task: `<config id>-<human commit>` from run_summary.json or journal.json (else
    the folder name's short sha; the config id, when neither file says, `<repo>_core` from the folder name
    `<repo>_<n>_<sha>`, as ISO-Bench names its configs); the contestant `<agent>:<model>` from run_summary.json,
    journal.json, prediction.jsonl or the folder path; the patch from model_patch.diff, else prediction.jsonl's.
    With `task_ids` (the set graded), an instance whose own task is not in the set but a shipped task answers
    for it (SHIPPED) names that task, its patch's paths mapped onto the task's tree."""
    out = []
    for folder in dict.fromkeys(_items(root)):
        summary, journal, line = _json(folder / "run_summary.json"), _json(folder / "journal.json"), \
            _prediction_line(folder)
        meta = summary.get("meta") if isinstance(summary.get("meta"), dict) else {}
        commits = summary.get("commits") or journal.get("commits") or {}
        commits = commits if isinstance(commits, dict) else {}
        human = str(commits.get("human") or "")
        short, item = _SHORT.search(folder.name), _ITEM.match(folder.name)
        if not human and short:
            human = short.group(1)
        if not human:
            raise PredictionsError(f"{folder}: no human commit (run_summary.json, journal.json or the folder name's "
                                   f"short sha)")
        config_id = str(meta.get("task_id") or journal.get("task_id") or (f"{item['repo']}_core" if item else ""))
        if not config_id:
            raise PredictionsError(f"{folder}: no task id (run_summary.json's meta.task_id or journal.json's task_id)")
        parts = folder.resolve().parts  # .../state/runs/<repo>/<agent>/<model>/<timestamp>/<item>
        run = journal.get("run_metadata") if isinstance(journal.get("run_metadata"), dict) else {}
        agent = str(meta.get("agent") or run.get("agent") or (parts[-4] if len(parts) >= 4 else "agent"))
        model = str(meta.get("model_full") or line.get("model_name_or_path") or meta.get("model")
                    or run.get("model") or (parts[-3] if len(parts) >= 3 else "model"))
        patch_file = folder / "model_patch.diff"
        try:
            patch = patch_file.read_text(encoding="utf-8") if patch_file.is_file() else str(
                line.get("model_patch") or "")
        except (OSError, UnicodeDecodeError) as e:
            raise PredictionsError(f"{patch_file}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        metrics = summary.get("metrics") or journal.get("metrics")
        instance, shipped = task_id(config_id, human), SHIPPED.get(human[:8].lower())
        if task_ids is not None and instance not in task_ids and shipped and shipped.task in task_ids:
            instance, patch = shipped.task, strip_prefix(patch, shipped.strip) if shipped.strip else patch
        out.append(Prediction(
            instance_id=instance, model_name_or_path=f"{agent}:{model}", model_patch=patch,
            iso_bench={"item": folder.name, "folder": str(folder), "agent": agent, "model": model, "human": human,
                       "pre": str(commits.get("pre") or ""), "status": summary.get("agent", {}).get("status")
                       if isinstance(summary.get("agent"), dict) else journal.get("status"),
                       "metrics": metrics if isinstance(metrics, dict) else None,
                       "hard": hard_metrics(summary, folder)},
            agent_result=agent_result(folder)))
    if not out:
        raise PredictionsError(f"{root}: no ISO-Bench item folder in it (model_patch.diff or prediction.jsonl)")
    return out

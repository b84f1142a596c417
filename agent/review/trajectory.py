"""`perfagent review RUN --trajectory`: one job's turns in order, as mini-swe-agent's inspector steps through
them: what the agent said, each tool call and what came back, and each grading of its change as it landed.

Read from the job's trajectory.jsonl (our loop's `response` / `tool_result` records; an external agent's
`relay` records, its provider's own requests and answers) and checks.json (each grading, placed in the turn it
happened in by its time). Plain text, one fact a line: a pipe or a narrow terminal wraps nothing of ours
mid-word. Everything shown came from the agent or the code under test: control characters are stripped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.checks.render import verdict_line
from agent.results.checks_log import carried, read_checks
from agent.results.layout import REPORT, TRAJECTORY, locate
from agent.results.load import load_run, report_or_none
from agent.util.files import iter_jsonl
from agent.util.text import strip_controls
from agent.errors import BadInput

__all__ = ["Step", "Turn", "TrajectoryError", "job_folder", "read_turns", "render_turns", "show_trajectory"]

SHORT_LINES = 6  # of a tool's output, without --turn
LINE_CHARS = 200  # of any one line, without --turn


class TrajectoryError(BadInput):
    """No job, several jobs, or no trajectory: one line for the user."""


@dataclass
class Step:
    """One thing that happened in a turn: `kind` says, `head` is its line, `body` what follows it."""

    kind: str  # says | call | output | grading | error
    head: str
    body: str = ""


@dataclass
class Turn:
    number: int
    time: float = 0.0
    steps: list[Step] = field(default_factory=list)
    cost_usd: float | None = None


def show_trajectory(path: Path | str, *, task: str | None = None, turn: int | None = None) -> str:
    """`review PATH --trajectory [--task KEY] [--turn N]`, as the text to print."""
    job_dir = job_folder(path, task)
    run_dir, key = locate(job_dir)
    about, turns = read_turns(job_dir)
    return render_turns(key or job_dir.name, about, turns, only=turn)


def job_folder(path: Path | str, task: str | None = None) -> Path:
    """The job folder `path` names: a job folder itself, or the one job of a run (or the one `task` picks)."""
    path = Path(path)
    if not path.is_dir():
        raise TrajectoryError(f"{path}: no such results folder")
    run_dir, key = locate(path)
    if key is not None:
        return run_dir / key
    keys = sorted(r.key for r in load_run(run_dir).records)
    if task is not None:
        keys = [k for k in keys if k == task or k.split("/")[0] == task]
    if len(keys) == 1:
        return run_dir / keys[0]
    if not keys:
        raise TrajectoryError(f"{path}: no job" + (f" of task {task!r}" if task else "") + " in this run")
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    raise TrajectoryError(f"{path} holds {len(keys)} jobs ({shown}): name one with --task KEY, or its folder")


def read_turns(job_dir: Path) -> tuple[dict[str, Any], list[Turn]]:
    """(the run's start and end records merged, its turns): the turns in order, each grading in its turn."""
    records = list(iter_jsonl(Path(job_dir) / TRAJECTORY))
    if not records:
        raise TrajectoryError(f"{job_dir}: no {TRAJECTORY} (the job left no trajectory)")
    about: dict[str, Any] = {}
    turns: list[Turn] = []
    relay = any(r.get("type") == "relay" for r in records)
    for rec in records:
        kind = rec.get("type")
        if kind in ("start", "end", "interrupted"):
            about.update({k: v for k, v in rec.items() if k not in ("type", "time", "system", "tools")})
        elif relay and kind == "relay":
            _relay(rec, turns)
        elif kind == "response":
            turn = Turn(int(rec.get("turn") or len(turns) + 1), float(rec.get("time") or 0.0),
                        cost_usd=rec.get("cost_usd"))
            if rec.get("text"):
                turn.steps.append(Step("says", "says:", str(rec["text"])))
            turns.append(turn)
        elif kind == "tool_result":
            _current(turns, rec).steps.append(_tool_result(rec))
        elif kind == "error":
            _current(turns, rec).steps.append(Step("error", f"error: {rec.get('error')}"))
    _place_gradings(job_dir, turns)
    return about, turns


def _current(turns: list[Turn], rec: dict[str, Any]) -> Turn:
    if not turns:
        turns.append(Turn(int(rec.get("turn") or 1), float(rec.get("time") or 0.0)))
    return turns[-1]


def _tool_result(rec: dict[str, Any]) -> Step:
    args = json.dumps(rec.get("input"), ensure_ascii=False) if rec.get("input") not in (None, {}) else ""
    state = "not run" if rec.get("not_run") else "error" if rec.get("is_error") else "ok"
    took = f", {rec['duration_s']:.1f}s" if isinstance(rec.get("duration_s"), (int, float)) else ""
    head = f"call: {rec.get('name')} {args}".rstrip() + f"  -> {state}{took}"
    return Step("call", head, str(rec.get("content") or ""))


def _relay(rec: dict[str, Any], turns: list[Turn]) -> None:
    """An external agent's exchange: a metered answer is a turn (what it said, the calls it made); the request
    before it carries the outputs of the previous turn's calls."""
    event = rec.get("event")
    if event == "request":
        outputs = _tool_outputs(rec.get("body"))
        if outputs and turns:
            turns[-1].steps += [Step("output", "output:", text) for text in outputs]
    elif event == "response":
        turn = Turn(len(turns) + 1, float(rec.get("time") or 0.0), cost_usd=rec.get("cost_usd"))
        if rec.get("error"):
            turn.steps.append(Step("error", f"error: {rec['error']}"))
        text, calls = _answer(rec.get("body"), rec.get("events") or [])
        if text:
            turn.steps.append(Step("says", "says:", text))
        turn.steps += [Step("call", f"call: {c}") for c in calls]
        turns.append(turn)
    elif event in ("refused", "relay_error"):
        _current(turns, rec).steps.append(Step("error", f"relay {event}: {rec.get('what') or rec.get('error')}"))


def _answer(body: Any, events: list[Any]) -> tuple[str, list[str]]:
    """(text, tool calls) of a provider's answer: Anthropic's Messages, OpenAI's chat completions or Responses,
    whole or streamed. What it cannot read it leaves out."""
    texts: list[str] = []
    calls: list[str] = []
    if isinstance(body, dict):
        for block in body.get("content") or []:  # Anthropic
            if isinstance(block, dict) and block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
            elif isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append(f"{block.get('name')} {json.dumps(block.get('input'), ensure_ascii=False)}")
        for choice in body.get("choices") or []:  # chat completions
            msg = choice.get("message") or {} if isinstance(choice, dict) else {}
            texts.append(str(msg.get("content") or ""))
            calls += [f"{(c.get('function') or {}).get('name')} {(c.get('function') or {}).get('arguments')}"
                      for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
        _responses_output(body.get("output"), texts, calls)
    tool: dict[int, list[str]] = {}
    for e in events:
        if not isinstance(e, dict):
            continue
        kind = e.get("type")
        if kind == "content_block_start" and (e.get("content_block") or {}).get("type") == "tool_use":
            tool[int(e.get("index") or 0)] = [str(e["content_block"].get("name")), ""]
        elif kind == "content_block_delta":
            delta = e.get("delta") or {}
            if delta.get("type") == "text_delta":
                texts.append(str(delta.get("text") or ""))
            elif delta.get("type") == "input_json_delta" and int(e.get("index") or 0) in tool:
                tool[int(e.get("index") or 0)][1] += str(delta.get("partial_json") or "")
        elif kind == "response.completed":
            _responses_output((e.get("response") or {}).get("output"), texts, calls)
        for choice in e.get("choices") or []:
            delta = choice.get("delta") or {} if isinstance(choice, dict) else {}
            texts.append(str(delta.get("content") or ""))
            for c in delta.get("tool_calls") or []:
                f = c.get("function") or {} if isinstance(c, dict) else {}
                slot = tool.setdefault(1000 + int(c.get("index") or 0), ["", ""])
                slot[0] += str(f.get("name") or "")
                slot[1] += str(f.get("arguments") or "")
    calls += [f"{name} {args}".rstrip() for name, args in tool.values()]
    return "".join(texts).strip(), calls


def _responses_output(output: Any, texts: list[str], calls: list[str]) -> None:
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts += [str(c.get("text") or "") for c in item.get("content") or [] if isinstance(c, dict)]
        elif item.get("type") in ("function_call", "custom_tool_call"):
            calls.append(f"{item.get('name')} {item.get('arguments') or item.get('input') or ''}".rstrip())
        elif item.get("type") == "local_shell_call":
            calls.append(f"shell {json.dumps((item.get('action') or {}).get('command'), ensure_ascii=False)}")


def _tool_outputs(body: Any) -> list[str]:
    """What the agent's tools gave back, as its next request carries them (after its last answer)."""
    if not isinstance(body, dict):
        return []
    out: list[str] = []
    items = body.get("messages") or body.get("input") or []
    for item in reversed(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        if item.get("role") == "assistant" or item.get("type") in ("function_call", "message"):
            break
        if item.get("role") == "tool" or item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out.append(_text(item.get("content") if item.get("role") == "tool" else item.get("output")))
        elif item.get("role") == "user" and isinstance(item.get("content"), list):
            out += [_text(b.get("content")) for b in item["content"]
                    if isinstance(b, dict) and b.get("type") == "tool_result"]
    return list(reversed(out))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text") or "") if isinstance(c, dict) else str(c) for c in content)
    return "" if content is None else str(content)


def _place_gradings(job_dir: Path, turns: list[Turn]) -> None:
    """Each grading of checks.json in the turn it landed in: the last turn that began before it; the one
    report.json carries says so (agent.results.checks_log's rule)."""
    gradings = read_checks(job_dir)
    final = carried(gradings, report_or_none(Path(job_dir) / REPORT))
    for g in gradings:
        line = verdict_line(g.evaluation) if g.evaluation is not None else "(unreadable)"
        what = "final evaluation" if g.full else "quick check"
        mark = "  (the grading report.json carries)" if final is not None and final.index == g.index else ""
        turn = next((t for t in reversed(turns) if t.time <= g.time), turns[0] if turns else None)
        step = Step("grading", f"grading #{(g.index or 0) + 1} ({what}): {line}{mark}")
        if turn is None:
            turns.append(Turn(1, g.time, [step]))
        else:
            turn.steps.append(step)


def render_turns(label: str, about: dict[str, Any], turns: list[Turn], *, only: int | None = None) -> str:
    """The turns as plain lines; `only`: that turn alone, its outputs whole. TrajectoryError for a turn that
    is not there."""
    if only is not None and not any(t.number == only for t in turns):
        raise TrajectoryError(f"no turn {only}: this trajectory has turns 1 to {len(turns)}" if turns
                              else "this trajectory has no turns")
    head = [f"job {label}",
            f"model {about.get('model', '?')}, {len(turns)} turn{'s' if len(turns) != 1 else ''}"
            + (f", ended {about['subtype']}" if about.get("subtype") else "")
            + ("" if only is not None else "  (--turn N shows one turn with its outputs whole)")]
    lines = [strip_controls(h) for h in head]
    for t in turns:
        if only is not None and t.number != only:
            continue
        cost = f"  (${t.cost_usd:.4f} so far)" if isinstance(t.cost_usd, (int, float)) and t.cost_usd > 0 else ""
        lines += ["", f"--- turn {t.number}{cost}"]
        for s in t.steps:
            lines.append("  " + _cut(strip_controls(s.head), whole=only is not None))
            lines += _body(s, whole=only is not None)
    if only is None and about.get("result"):
        lines += ["", "end: " + _cut(strip_controls(str(about["result"]).splitlines()[0] if str(about["result"])
                                                   else ""), whole=False)]
    return "\n".join(lines) + "\n"


def _body(s: Step, *, whole: bool) -> list[str]:
    text = strip_controls(s.body, multiline=True).rstrip("\n")
    if not text:
        return []
    rows = text.splitlines()
    keep = rows if whole or s.kind == "says" and len(rows) <= SHORT_LINES * 2 else rows[:SHORT_LINES]
    out = ["      " + _cut(r, whole=whole) for r in keep]
    if len(keep) < len(rows):
        out.append(f"      ... {len(rows) - len(keep)} more line(s)")
    return out


def _cut(line: str, *, whole: bool) -> str:
    return line if whole or len(line) <= LINE_CHARS else line[:LINE_CHARS] + f"... ({len(line)} chars)"

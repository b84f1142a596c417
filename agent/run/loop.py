"""The agent loop: ask the model, run the tools it asks for, stop on submit or a budget.

Everything that happens is appended to the trajectory as it happens, so an interrupted run
can still be read (and replayed). Checks are reached through two callbacks, so this file
knows nothing about how a candidate is graded.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.models.base import OFFLINE_MODELS, Deadline, Model, ModelError, Reply, Usage
from agent.models.pricing import PriceTable, cost_usd
from agent.task import Task
from agent.run.tools import Toolbox


SYSTEM_PROMPT = """\
You are a performance engineer optimising code in a git repository. You work only through
the tools you are given; every path is relative to the repository root.

Task: {title}
{prompt}

Files to look at first: {focus}
Protected (read-only; a patch touching them is rejected): {protected}

How your work is judged, by `run_checks` and again after `submit`:
- correctness: `{correctness}` must pass, and{poison} pass again with uninitialised memory
  poisoned (torch.empty returns NaN / max-int), so a buffer read before it is written fails;
- every line you change must be executed by those tests, or the result is "unverified";
- performance: `{perf}` is run alternately on the baseline and on your change, and a speedup
  counts only when its 95% confidence interval excludes 1.
Make focused changes, run `run_checks`, then call `submit` with a summary of each change and
why it is safe. Do not claim safety you have not checked.
"""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread so every `finally` on the way out runs.

    A KeyboardInterrupt, not an Exception: a tool's or a check's `except Exception` must not
    swallow it and carry on.
    """

    def __init__(self, signal_name: str = "SIGINT"):
        super().__init__(signal_name)
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        return signal_exit_code(self.signal_name)


def signal_exit_code(signal_name: str) -> int:
    """The shell's convention: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(getattr(signal, signal_name, signal.SIGINT))


def interrupted_by(err: KeyboardInterrupt) -> str:
    """The signal behind an interrupt: a plain Ctrl-C without our handler is SIGINT."""
    return err.signal_name if isinstance(err, Interrupted) else "SIGINT"


@dataclass(frozen=True)
class Limits:
    max_turns: int
    max_cost_usd: float
    timeout_s: float
    retry_failed_submit: bool = True

    @classmethod
    def of(cls, task: Task, **overrides: Any) -> "Limits":
        b = task.spec.budget
        base = dict(max_turns=b.max_turns, max_cost_usd=b.max_cost_usd, timeout_s=b.timeout_s)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass
class Outcome:
    """What the loop produced; report.py turns it into report.json."""

    subtype: str = "success"  # success | error_max_turns | error_max_budget | error_during_execution
    result: str = ""
    num_turns: int = 0
    duration_s: float = 0.0
    api_duration_s: float = 0.0
    usage_by_model: dict[str, Usage] = field(default_factory=dict)
    cost_by_model: dict[str, float | None] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    submitted: bool = False
    interrupted: str | None = None  # the signal that stopped the run, e.g. "SIGTERM"

    @property
    def total_cost_usd(self) -> float | None:
        costs = list(self.cost_by_model.values())
        return None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]

    @property
    def is_error(self) -> bool:
        return self.subtype != "success"

    def interrupt(self, signal_name: str) -> None:
        self.subtype, self.result, self.interrupted = "error_during_execution", f"interrupted by {signal_name}", signal_name


class Trajectory:
    """Append-only JSONL: one whole line per write, flushed, so a crash never leaves half a record."""

    def __init__(self, path: Path | None):
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def add(self, kind: str, **data: Any) -> None:
        if self.path is None:
            return
        line = json.dumps({"type": kind, "time": time.time(), **data}, default=str)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def system_prompt(task: Task) -> str:
    s = task.spec
    return SYSTEM_PROMPT.format(
        title=s.title or s.id, prompt=s.prompt.strip(), focus=", ".join(s.focus) or "(none given)",
        protected=", ".join(s.protected) or "(none)", correctness=s.correctness.command,
        poison="" if s.correctness.poison else " (poison mode is off for this task, but still)",
        perf=s.perf.command if s.perf else "(no perf check for this task)",
    )


def run_loop(
    task: Task,
    model: Model,
    tools: Toolbox,
    *,
    limits: Limits,
    prices: PriceTable,
    grade_submission: Callable[[], tuple[bool, str]],
    trajectory: Trajectory,
    on_event: Callable[[str, dict], None] = lambda kind, data: None,
) -> Outcome:
    """Turns until submit (and passing checks) or a limit; never raises for the model's mistakes.

    SIGINT / SIGTERM (an Interrupted, or a plain KeyboardInterrupt) end the loop too: the outcome
    says "interrupted by <signal>" and the trajectory records where it struck.
    """
    out = Outcome()
    start = time.monotonic()
    deadline = start + limits.timeout_s
    if isinstance(getattr(model, "deadline", None), Deadline):
        model.deadline.at = deadline  # type: ignore[attr-defined] — HTTP adapters bound each request by it
    system = system_prompt(task)
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": task.spec.prompt.strip()}]}]
    trajectory.add("start", task=task.id, model=model.name, system=system, tools=tools.schemas, limits=limits.__dict__)
    try:
        _turns(model, tools, out, system, messages, deadline, limits=limits, prices=prices,
               grade_submission=grade_submission, trajectory=trajectory, on_event=on_event)
    except KeyboardInterrupt as e:
        out.interrupt(interrupted_by(e))
        trajectory.add("interrupted", turn=out.num_turns, signal=out.interrupted)
    out.duration_s = time.monotonic() - start
    trajectory.add("end", subtype=out.subtype, num_turns=out.num_turns, result=out.result)
    return out


def _turns(model: Model, tools: Toolbox, out: Outcome, system: str, messages: list[dict], deadline: float, *,
           limits: Limits, prices: PriceTable, grade_submission: Callable[[], tuple[bool, str]],
           trajectory: Trajectory, on_event: Callable[[str, dict], None]) -> None:
    """The turns themselves, filling `out`; returns when the run is over."""
    warned_unpriced: set[str] = set()
    idle = False  # the previous reply made no tool call

    while True:
        if out.num_turns >= limits.max_turns:
            out.subtype, out.result = "error_max_turns", out.result or f"stopped after {limits.max_turns} turns without a passing submit"
            break
        if time.monotonic() > deadline:
            out.subtype, out.result = "error_during_execution", f"timed out after {limits.timeout_s:g}s"
            break
        out.num_turns += 1
        on_event("turn", {"turn": out.num_turns})
        try:
            reply = complete_by(model, system, messages, tools.schemas, deadline)
        except ModelError as e:
            out.subtype, out.result = "error_during_execution", f"model error: {e}"
            trajectory.add("error", turn=out.num_turns, error=str(e))
            break
        if reply is None:
            out.subtype = "error_during_execution"
            out.result = f"timed out after {limits.timeout_s:g}s (the run's time limit) waiting for the model to reply"
            trajectory.add("error", turn=out.num_turns, error=out.result)
            break
        _account(out, reply, prices, warned_unpriced)
        trajectory.add("response", turn=out.num_turns, **_reply_record(reply), cost_usd=out.total_cost_usd)
        on_event("usage", {"usage": sum(out.usage_by_model.values(), Usage()), "cost_usd": out.total_cost_usd})
        messages.append({"role": "assistant", "content": _assistant_blocks(reply)})

        if not reply.tool_calls:
            out.result = reply.text or out.result
            if idle:  # nudged once already: the model is done talking
                break
            idle = True
            messages.append({"role": "user", "content": [{"type": "text", "text":
                             "Use the tools to work on the task; call `submit` when you are done."}]})
        else:
            idle = False
            results, done = _run_tools(reply, tools, trajectory, out, grade_submission, limits, on_event)
            messages.append({"role": "user", "content": results})
            if done:
                break
        if limits.max_cost_usd and (out.total_cost_usd or 0) > limits.max_cost_usd:
            out.subtype = "error_max_budget"
            out.result = out.result or f"stopped: cost ${out.total_cost_usd:.4f} exceeded the budget of ${limits.max_cost_usd:g}"
            break


def complete_by(model: Model, system: str, messages: list[dict], tools: list[dict], deadline: float) -> Reply | None:
    """`model.complete` in a daemon thread, waited for until `deadline` (time.monotonic()) at most.

    None when the time ran out: whatever a provider's SDK does meanwhile (a server that never
    answers, a `retry-after: 3600` it sleeps out), the run ends on time. The abandoned call
    dies with the process. Signals still reach the caller, which waits in the main thread.
    """
    result: list = []

    def call() -> None:
        try:
            result.append(model.complete(system, list(messages), tools))
        except BaseException as e:  # noqa: BLE001 — re-raised in the caller's thread
            result.append(e)

    worker = threading.Thread(target=call, name="model-call", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if not result:
        return None
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _run_tools(reply: Reply, tools: Toolbox, trajectory: Trajectory, out: Outcome,
               grade_submission: Callable[[], tuple[bool, str]], limits: Limits,
               on_event: Callable[[str, dict], None]) -> tuple[list[dict], bool]:
    results, done = [], False
    for call in reply.tool_calls:
        on_event("tool", {"name": call.name})
        t0 = time.monotonic()
        try:
            if call.error:
                content, is_error = f"could not parse the arguments of {call.name}: {call.error}", True
            else:
                res = tools.call(call.name, call.input, call.id)
                content, is_error = res.content, res.is_error
            if call.name == "submit" and not is_error and tools.submitted is not None:
                out.result, out.submitted = tools.submitted, True
                passed, summary = grade_submission()
                content = f"submission checked:\n{summary}"
                if passed or not limits.retry_failed_submit:
                    done = True
                else:
                    content += "\nThe submission did not pass. Fix the problems above and submit again."
                    is_error = True
        except KeyboardInterrupt as e:  # the trajectory says which call the signal cut short
            trajectory.add("tool_result", turn=out.num_turns, tool_use_id=call.id, name=call.name, input=call.input,
                           content=f"interrupted by {interrupted_by(e)}", is_error=True,
                           duration_s=round(time.monotonic() - t0, 3))
            raise
        trajectory.add("tool_result", turn=out.num_turns, tool_use_id=call.id, name=call.name, input=call.input,
                       content=content, is_error=is_error, duration_s=round(time.monotonic() - t0, 3))
        results.append({"type": "tool_result", "tool_use_id": call.id, "content": content, "is_error": is_error})
    return results, done


def _account(out: Outcome, reply: Reply, prices: PriceTable, warned: set[str]) -> None:
    out.api_duration_s += reply.api_duration_s
    model = reply.model or "unknown"
    out.usage_by_model[model] = out.usage_by_model.get(model, Usage()) + reply.usage
    cost = 0.0 if model in OFFLINE_MODELS else cost_usd(model, out.usage_by_model[model], prices)
    if cost is None and model not in warned:
        warned.add(model)
        out.warnings.append(f"no price known for model {model!r}: its cost is reported as null")
    out.cost_by_model[model] = cost


def _reply_record(reply: Reply) -> dict:
    return {
        "model": reply.model, "stop_reason": reply.stop_reason, "text": reply.text,
        "tool_calls": [{"id": c.id, "name": c.name, "input": c.input, "error": c.error} for c in reply.tool_calls],
        "usage": reply.usage.to_dict(), "api_duration_s": reply.api_duration_s, "raw": reply.raw,
    }


def _assistant_blocks(reply: Reply) -> list[dict]:
    blocks: list[dict] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in reply.tool_calls]
    return blocks

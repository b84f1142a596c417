"""The agent loop: ask the model, run the tools it asks for, stop on submit or a budget.

Everything that happens is appended to the trajectory as it happens, so an interrupted run
can still be read (and replayed). Checks are reached through two callbacks, so this file
knows nothing about how a candidate is graded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from agent.models.base import Deadline, Model, ModelError, Reply, ToolCall, Usage
from agent.models.budget import Spend
from agent.models.pricing import PriceTable
from agent.options import Limits
from agent.run.exits import (Interrupted, MaxTurns, ModelFailed, OverBudget, RunEnded, RunExit,
                             StoppedWithoutSubmitting, Submitted, TimedOut, as_interrupted)
from agent.run.prompts import NUDGE, system_prompt
from agent.run.tools import Toolbox
from agent.task import Task
from agent.util.files import append_jsonl


@dataclass
class Outcome(Spend):
    """What the loop produced, its spend included; the runner turns it into report.json."""

    subtype: str = "success"  # the RunExit's: success | error_max_turns | error_max_budget | error_during_execution
    result: str = ""
    num_turns: int = 0
    duration_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    interrupted: str | None = None  # the signal that stopped the run, e.g. "SIGTERM"

    @property
    def is_error(self) -> bool:
        return self.subtype != "success"

    @property
    def submitted(self) -> bool:
        """A submit whose final checks passed ended the run."""
        return self.subtype == Submitted.subtype

    def end(self, why: RunExit) -> None:
        self.subtype, self.result = why.subtype, why.result
        if isinstance(why, Interrupted):
            self.interrupted = why.signal_name


class Trajectory:
    """Append-only JSONL: one whole line per write, flushed, so a crash never leaves half a record."""

    def __init__(self, path: Path | None):
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def add(self, kind: str, **data: Any) -> None:
        if self.path is not None:
            append_jsonl(self.path, {"type": kind, "time": time.time(), **data})


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
    except RunEnded as e:
        out.end(e)
    except KeyboardInterrupt as e:
        out.end(as_interrupted(e))
        trajectory.add("interrupted", turn=out.num_turns, signal=out.interrupted)
    out.duration_s = time.monotonic() - start
    trajectory.add("end", subtype=out.subtype, num_turns=out.num_turns, result=out.result)
    return out


def _turns(model: Model, tools: Toolbox, out: Outcome, system: str, messages: list[dict], deadline: float, *,
           limits: Limits, prices: PriceTable, grade_submission: Callable[[], tuple[bool, str]],
           trajectory: Trajectory, on_event: Callable[[str, dict], None]) -> NoReturn:
    """The turns themselves, filling `out`'s figures; ends by raising the RunEnded that says why."""
    warned_unpriced: set[str] = set()
    idle = False  # the previous reply made no tool call

    while True:
        if out.num_turns >= limits.max_turns and (limits.turns_asked or not getattr(model, "scripted", False)):
            raise MaxTurns(limits.max_turns)
        if time.monotonic() > deadline:
            raise TimedOut(limits.timeout_s)
        out.num_turns += 1
        on_event("turn", {"turn": out.num_turns})
        try:
            reply = complete_by(model, system, messages, tools.schemas, deadline)
        except ModelError as e:
            trajectory.add("error", turn=out.num_turns, error=str(e))
            raise ModelFailed(e) from None
        if reply is None:
            timed_out = TimedOut(limits.timeout_s, waiting_for_model=True)
            trajectory.add("error", turn=out.num_turns, error=timed_out.result)
            raise timed_out
        _account(out, reply, prices, warned_unpriced)
        trajectory.add("response", turn=out.num_turns, **_reply_record(reply), cost_usd=out.total_cost_usd)
        on_event("usage", {"usage": sum(out.usage_by_model.values(), Usage()), "cost_usd": out.total_cost_usd})
        messages.append({"role": "assistant", "content": _assistant_blocks(reply)})

        if not reply.tool_calls:
            if idle:  # nudged once already: the model is done talking
                raise StoppedWithoutSubmitting(reply.text)
            idle = True
            messages.append({"role": "user", "content": [{"type": "text", "text": NUDGE}]})
        else:
            idle = False
            messages.append({"role": "user", "content": _run_tools(reply, tools, trajectory, out.num_turns,
                                                                   grade_submission, on_event)})
        if out.over(limits.max_cost_usd):
            raise OverBudget(out.total_cost_usd or 0.0, limits.max_cost_usd)


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


def _run_tools(reply: Reply, tools: Toolbox, trajectory: Trajectory, turn: int,
               grade_submission: Callable[[], tuple[bool, str]],
               on_event: Callable[[str, dict], None]) -> list[dict]:
    """The reply's tool calls in order, as tool_result blocks. A passing submit raises Submitted:
    the calls after it in the same reply do not run, and the trajectory says so."""
    results = []
    for n, call in enumerate(reply.tool_calls):
        on_event("tool", {"name": call.name})
        t0 = time.monotonic()
        try:
            block, passed = _run_tool(call, tools, grade_submission)
        except KeyboardInterrupt as e:  # the trajectory says which call the signal cut short
            _record(trajectory, turn, call, as_interrupted(e).result, True, t0)
            raise
        _record(trajectory, turn, call, block["content"], block["is_error"], t0)
        if passed:
            for later in reply.tool_calls[n + 1:]:
                _record(trajectory, turn, later, "not run: a submission before it passed and ended the run", True,
                        time.monotonic(), not_run=True)
            raise Submitted(tools.submitted or "")
        results.append(block)
    return results


def _run_tool(call: ToolCall, tools: Toolbox, grade_submission: Callable[[], tuple[bool, str]]) -> tuple[dict, bool]:
    """One call as a neutral tool_result block, and whether it was a submit that passed the checks."""
    if call.error:
        return _block(call, f"could not parse the arguments of {call.name}: {call.error}", True), False
    res = tools.call(call.name, call.input, call.id)
    if call.name != "submit" or res.is_error or tools.submitted is None:
        block = _block(call, res.content, res.is_error)
        return ({**block, "data": res.data} if res.data is not None else block), False
    passed, summary = grade_submission()
    if passed:
        return _block(call, f"submission checked:\n{summary}", False), True
    return _block(call, f"submission checked:\n{summary}\n"
                  "The submission did not pass. Fix the problems above and submit again.", True), False


def _block(call: ToolCall, content: str, is_error: bool) -> dict:
    return {"type": "tool_result", "tool_use_id": call.id, "content": content, "is_error": is_error}


def _record(trajectory: Trajectory, turn: int, call: ToolCall, content: str, is_error: bool, t0: float,
            **extra: Any) -> None:
    trajectory.add("tool_result", turn=turn, tool_use_id=call.id, name=call.name, input=call.input, content=content,
                   is_error=is_error, duration_s=round(time.monotonic() - t0, 3), **extra)


def _account(out: Outcome, reply: Reply, prices: PriceTable, warned: set[str]) -> None:
    model = reply.model or "unknown"
    out.count(model, reply.usage, prices, reply.api_duration_s)
    if out.cost_by_model[model] is None and model not in warned:
        warned.add(model)
        out.warnings.append(f"no price known for model {model!r}: its cost is reported as null")


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

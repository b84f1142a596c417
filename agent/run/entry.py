"""One task run from a request, exactly as `perfagent run` does it; a batch job process calls the same.

Every name, file and flag is checked (`check_request`) before anything is written and before the
provider SDKs or the checks are imported, so a mistake is refused in under a second; an API model
is refused where the sandbox is incomplete (unless allowed); SIGINT/SIGTERM end the run with its
report, and the exit code says how it ended. `guarded` is the one catch at the top, for every command
line and job process alike: a `PerfagentError` (agent/errors.py draws them all) is one line and its exit code.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.markup import escape

from agent.agents import AGENT_NAMES, EXTERNAL_AGENTS, OWN_AGENT, PREDICTION, AgentError, make_agent, split_spec
from agent.errors import BadInput, PerfagentError
from agent.options import RunOptions
from agent.results.layout import RUNNING, claim_job, job_paths, job_running
from agent.run.names import check_job, check_run_id
from agent.task import Task, load_task
from agent.util.text import markup_safe

if TYPE_CHECKING:
    from agent.interchange.predictions import Prediction
    from agent.run.graded import RunResult

# Providers whose models are real, untrusted agents, and the external agents: they run only in a
# complete sandbox (an external agent's only network is the relay, which needs it too).
API_PROVIDERS = ("anthropic", "openai", *EXTERNAL_AGENTS)
Display = Literal["summary", "json", "quiet", "log"]  # log: a line per step on stdout (a batch job's log)


class UserError(BadInput):
    """A flag or argument the command itself refuses: printed as one line, exit code 2."""


class RunRequest(BaseModel):
    """One run: what `perfagent run` takes from its flags, and what a batch sends a job process as JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_file: str
    agent: str = OWN_AGENT  # perfagent (our loop) | claude-code | codex | mini-swe-agent
    # our loop: rules | anthropic[:M] | openai:M | replay:FILE (or "<agent>:<model>"); else the agent's model
    model: str = ""
    options: RunOptions = RunOptions()
    run_id: str | None = None  # None: a new one
    job: str | None = None  # results sub-folder; None: the task id
    out_dir: str = "."


def guarded(call: Callable[[], int]) -> int:
    """`call()`'s exit code; an error perfagent raised on purpose is one line and its class's exit code (2 for
    bad input; agent/errors.py), any other a line and 1 (never wrapped at the terminal's width: a script
    reading stderr gets the line whole)."""
    err = Console(stderr=True, soft_wrap=True, emoji=False)
    try:
        return call()
    except PerfagentError as e:
        err.print(f"[red]error:[/] {markup_safe(str(e))}", highlight=False)
        return e.exit_code
    except KeyboardInterrupt as e:  # an Interrupted (SIGTERM too) that struck outside a run's own handling
        err.print("[red]interrupted[/]")
        return getattr(e, "exit_code", 130)
    except Exception as e:
        if os.environ.get("PERFAGENT_DEBUG"):
            raise
        err.print(f"[red]internal error:[/] {type(e).__name__}: {markup_safe(str(e))} "
                  "(PERFAGENT_DEBUG=1 shows the traceback)", highlight=False)
        return 1


def run_request(request: RunRequest, out: Console, display: Display = "summary") -> int:
    """Run one task: 0 for a run that ended in success, 1 for an error subtype, 128 + signal if interrupted."""
    task, agent_name, model_spec = check_request(request)  # every refusal before the imports below (seconds)
    from agent.run.exits import signal_exit_code
    from agent.run.model_spec import make_model
    from agent.run.names import new_run_id
    from agent.run.progress import EventLog, RunProgress

    opts = request.options
    kwargs = {"out_dir": Path(request.out_dir), "run_id": request.run_id or new_run_id(), "job": request.job,
              "prices": opts.price_table(), "limits": opts.limits(task), "lock_dir": opts.lock_dir,
              "keep_workspace": opts.keep_workspace}
    if agent_name == PREDICTION:
        from agent.run.prediction import grade_prediction

        prediction = _prediction(request, task.id, model_spec)
        label = f"{PREDICTION} · {model_spec}"
        run = partial(grade_prediction, task, prediction, out_dir=Path(request.out_dir), run_id=kwargs["run_id"],
                      job=request.job, lock_dir=opts.lock_dir, keep_workspace=opts.keep_workspace)
    elif agent_name == OWN_AGENT:
        from agent.run.runner import run_task

        model = make_model(model_spec or "rules", base_url=opts.base_url, stream=opts.stream, task=task)
        label, run = model.name, partial(run_task, task, model, **kwargs)
    else:
        from agent.run.external import run_external

        agent = make_agent(agent_name, model_spec)
        label = f"{agent.name} · {agent.model}"
        run = partial(run_external, task, agent, rounds=opts.rounds, base_url=opts.base_url, **kwargs)
    err = Console(stderr=True, soft_wrap=True, emoji=False)  # an error or warning is one line, however long
    folder = job_paths(request.out_dir, kwargs["run_id"], request.job or task.id)[0]
    with claim_job(folder), _signals_interrupt():  # a live run's hold (JobInUse) is one line, as any BadInput
        if display == "log":
            result = run(on_event=EventLog(lambda line: print(line, flush=True)))
        elif display != "summary":
            result = run()
        else:
            with RunProgress(err, f"{task.id} · {label}") as progress:
                result = run(on_event=progress)
    report = result.report
    if display == "json":
        print(report.to_json(), end="")
    elif display == "summary":
        _print_summary(out, result)
    for w in result.outcome.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    if report.is_error:
        err.print(f"[red]error:[/] {report.subtype}: {escape(report.result)} (outputs in {result.paths.report.parent})",
                  highlight=False)
        return signal_exit_code(result.outcome.interrupted) if result.outcome.interrupted else 1
    return 0


def check_request(request: RunRequest) -> tuple[Task, str, str]:
    """(task, agent, model spec) of a request whose every name, file and flag is sound, else the one-line
    refusal: found before a provider SDK, the checks or a workspace is loaded or made, and before anything is
    written. A live run's hold on the job's folder is asked first of all: its run id is taken."""
    from agent.models.pricing import PricingError
    from agent.run.model_spec import check_spec

    if request.run_id is not None:  # before anything is read or written
        check_run_id(request.run_id)
    if request.job is not None:
        check_job(request.job)
    task = load_task(request.task_file)
    if request.job is None:
        check_job(task.id)  # the default job name
    folder = job_paths(request.out_dir, request.run_id, request.job or task.id)[0] if request.run_id else None
    if folder is not None and job_running(folder):
        try:
            holder = (folder / RUNNING).read_text(errors="replace").strip() or "?"
        except OSError:
            holder = "?"
        raise UserError(f"{folder} is being written by a live run (pid {holder}): give this one another --run-id")
    opts = request.options
    agent_name, model_spec = (split_spec(request.model) if request.agent == OWN_AGENT
                              else (request.agent, request.model))
    if agent_name == OWN_AGENT:
        provider, name = check_spec(model_spec or "rules")
        if provider == "replay":
            from agent.models.replay import load_turns

            load_turns(Path(name))
        require_sandbox([model_spec], opts.allow_unsandboxed)
    elif agent_name != PREDICTION:
        if agent_name not in EXTERNAL_AGENTS:
            raise AgentError(f"unknown agent {agent_name!r}: expected one of {', '.join(AGENT_NAMES)}")
        if opts.rounds < 1:
            raise UserError("--rounds must be at least 1")
        require_sandbox([agent_name], opts.allow_unsandboxed)
    try:
        opts.price_table()
    except PricingError as e:
        raise UserError(f"--prices: {e}") from None
    from agent.env.workspace import check_task_base

    check_task_base(task)
    return task, agent_name, model_spec


def _prediction(request: RunRequest, task_id: str, name: str) -> "Prediction":
    """The prediction a job of `check --predictions` grades: sample k of (task, name) in its run's copy of
    the predictions file."""
    from agent.results.layout import PREDICTIONS, run_folder, split_key
    from agent.interchange.predictions import by_attempt, read_predictions

    if request.run_id is None:
        raise UserError("a prediction is graded inside a run: use perfagent check SET --predictions FILE")
    path = run_folder(request.out_dir, request.run_id) / PREDICTIONS
    attempts = by_attempt(read_predictions([path])).get((task_id, name), [])
    k = split_key(request.job or task_id).sample
    if k >= len(attempts):
        raise UserError(f"{path}: no prediction {k + 1} of {name!r} for {task_id!r}")
    return attempts[k]


def require_sandbox(specs: list[str], allowed: bool) -> None:
    """Refuse to let a real API model's commands run where the sandbox is incomplete, unless allowed."""
    api = [s.strip() for s in specs if s.strip().partition(":")[0] in API_PROVIDERS]
    if not api or allowed:
        return
    from agent.env.sandbox import isolation

    iso = isolation()
    if not iso.complete:
        raise UserError(f"refusing to run {api[0]} unsandboxed ({iso.mode} here): not isolated: "
                        f"{'; '.join(iso.missing)}; install bubblewrap, or pass --allow-unsandboxed to run anyway")


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread, so the run writes its report, its best
    patch so far and cleans up. Only the first one raises: a second one must not cut that short."""
    from agent.run.exits import Interrupted

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise Interrupted(signal.Signals(signum).name)

    # An ignored signal (nohup, a background job) stays ignored.
    old = {s: h for s in (signal.SIGINT, signal.SIGTERM) if (h := signal.getsignal(s)) is not signal.SIG_IGN}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _print_summary(out: Console, result: RunResult) -> None:
    r = result.report
    ev = r.evaluation
    perf = ev.perf if ev is not None else None
    cost = "unknown" if r.total_cost_usd is None else f"${r.total_cost_usd:.4f}"
    out.print(f"[bold]{r.subtype}[/] in {r.num_turns} turns, {r.duration_ms / 1000:.1f}s, cost {cost}")
    out.print(f"verdict: [bold]{ev.verdict if ev is not None else '-'}[/]", highlight=False)
    if perf is not None:
        out.print(f"perf {perf.metric}: ratio {perf.ratio or 0:.3f} "
                  f"[{perf.ci_low or 0:.3f}, {perf.ci_high or 0:.3f}] "
                  f"p={perf.p_value if perf.p_value is not None else 1:.2g} "
                  f"-> {perf.verdict}", highlight=False)
    out.print(f"patch:  {result.paths.patch}\nreport: {result.paths.report}", highlight=False)

"""One run of an external agent: sealed in the sandbox, metered by the relay, graded by our checks.

    workspace -> relay up -> round 1: the agent with the task prompt and our rules -> grade its diff
              -> round 2..N (while it fails): the same agent, resumed, told what the checks found
              -> the best passing candidate emitted, the agent's claims beside our evidence

The agent's sessions run in the sandbox with the workspace and a HOME of their own writable,
and no network but the relay; cost and tokens are the relay's, the agent's own figures are
kept for comparison. Whatever goes wrong (the agent missing, too old, crashing, hanging, over
budget, interrupted), report.json is written and says why in one line.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.agents import AgentError
from agent.agents.base import AgentResult, ExternalAgent, Session
from agent.agents.metering import Meter
from agent.agents.relay import Relay, RelayError, Upstream, bridge_command
from agent.checks import Checker, Evaluation, summarize
from agent.checks.verdicts import Verdict
from agent.env.candidate import Candidate, LeftOut, with_left_out
from agent.env.sandbox import CommandResult, SandboxSpec, base_env, run_command
from agent.env.workspace import Workspace
from agent.models.base import Usage
from agent.models.pricing import PriceTable
from agent.options import Limits
from agent.results.report import AgentRound, AgentRun
from agent.run.exits import AgentFailed, OverBudget, RunExit, TimedOut
from agent.run.graded import Contestant, Emission, GradedRun, RunResult, final_emission, graded_run
from agent.run.loop import Outcome
from agent.run.prompts import agent_prompt
from agent.task import Task
from agent.util.files import atomic_write, write_json
from agent.util.text import first_line, tail

DEFAULT_ROUNDS = 2
MAX_AGENT_OUTPUT = 4 << 20
# A Unix socket's path must fit in 108 bytes: the relay's lives in a short folder, not under TMPDIR.
SOCKET_PARENT = "/tmp"
# The agent's own cost and ours agree when within this fraction (rounding in its own figures).
COST_TOLERANCE = 0.005


@dataclass
class Sealed:
    """Where one agent runs: its workspace, its HOME, its output folder and the relay's socket."""

    ws: Workspace
    home: Path
    out: Path
    socket: Path
    bin_dir: Path | None = None  # the task's Python, first on the agent's PATH
    sandbox: SandboxSpec = SandboxSpec()  # what the task's commands may see (`for_task`); a session's folders go on top


SessionRunner = Callable[[Session, Sealed, float], CommandResult]  # one session, its time left: what it printed


@dataclass
class ExternalAgentContestant(Contestant):
    """An external agent in the sandbox for up to `rounds` sessions, each graded, metered by the relay.
    `sessions`: the seam for one session (default: the agent's command, sealed, through the relay)."""

    agent: ExternalAgent
    prices: PriceTable
    limits: Limits
    rounds: int = DEFAULT_ROUNDS
    base_url: str | None = None
    sessions: SessionRunner | None = None
    binary: Path | None = None
    meter: Meter | None = None
    relay_dir: Path | None = None
    record: AgentRun = field(init=False)

    def __post_init__(self) -> None:
        self.record = AgentRun(name=self.agent.name, model=self.agent.model)

    def prepare(self, run: GradedRun) -> None:
        self.relay_dir = Path(tempfile.mkdtemp(prefix="perfagent-relay-",
                                               dir=SOCKET_PARENT if Path(SOCKET_PARENT).is_dir() else None))
        self.meter = Meter(self.prices, max_cost_usd=self.limits.max_cost_usd,
                           deadline=run.start + self.limits.timeout_s)
        _ = run.trajectory  # started at once, as the run starts: every exchange through the relay lands in it
        with _agent_errors(self.agent):
            self.binary = self.agent.locate()
            self.record.version = self.agent.version(self.binary)

    def play(self, run: GradedRun) -> Emission:
        agent, meter, ws = self.agent, self.meter, run.ws
        assert meter is not None and ws is not None and self.relay_dir is not None

        def relayed(record: dict) -> None:
            """Each exchange into the trajectory; each metered answer on to the live display, as a turn."""
            run.trajectory.add("relay", **record)
            if record.get("event") == "response" and "usage" in record:
                run.on_event("turn", {"turn": meter.requests, "activity": f"{agent.name} at work"})
                run.on_event("usage", {"usage": sum(meter.usage_by_model.values(), Usage()),
                                       "cost_usd": meter.total_cost_usd})

        with _agent_errors(agent):
            upstream = Upstream.of(agent.provider, self.base_url)
            sealed = Sealed(ws, _folder(run.work / "home"), _folder(run.work / "out"), self.relay_dir / "relay.sock",
                            run.checker.bin_dir(), SandboxSpec.for_task(run.task))
            with Relay(upstream, meter, sealed.socket, log=relayed, models=agent.models()):
                why = _rounds(run.task, agent, self.sessions or self.sealed_session, sealed, self.rounds, self.limits,
                              meter, self.record, _kept(run), lambda cand: run.candidates.grade(cand, full=True),
                              run.on_event, run.start)
        run.outcome.end(why)
        return final_emission(ws, run.candidates, run.outcome)

    def sealed_session(self, session: Session, sealed: Sealed, time_left_s: float) -> CommandResult:
        assert self.binary is not None and self.meter is not None
        return _session(self.agent, self.binary, session, sealed, self.meter, time_left_s)

    def interrupted(self, run: GradedRun) -> None:
        run.trajectory.add("interrupted", signal=run.outcome.interrupted)

    def settle(self, run: GradedRun) -> dict[str, Any]:
        if run.ws is not None:
            atomic_write(_kept(run) / "final.diff", run.ws.diff())
            self.record.files["final_diff"] = "agent/final.diff"
        if self.meter is not None:
            _account(run.outcome, self.meter, self.record, run.start, cumulative_cost=self.agent.cumulative_cost)
        return {"agent": self.record}

    def close(self) -> None:
        if self.relay_dir is not None:
            shutil.rmtree(self.relay_dir, ignore_errors=True)


def run_external(
    task: Task,
    agent: ExternalAgent,
    *,
    out_dir: Path,
    run_id: str,
    job: str | None = None,
    prices: PriceTable,
    limits: Limits | None = None,
    rounds: int = DEFAULT_ROUNDS,
    base_url: str | None = None,
    lock_dir: Path | None = None,
    keep_workspace: bool = False,
    on_event: Callable[[str, dict], None] = lambda kind, data: None,
    checker: Checker | None = None,
    sessions: SessionRunner | None = None,
) -> RunResult:
    """Run `agent` on `task` for up to `rounds` sessions; write report.json, the diff and the agent's outputs.
    `checker` and `sessions`: the grader's and the session's seams (default: the real ones)."""
    contestant = ExternalAgentContestant(agent, prices, limits or Limits.of(task), rounds, base_url, sessions)
    return graded_run(task, contestant, out_dir=out_dir, run_id=run_id, job=job, lock_dir=lock_dir,
                      keep_workspace=keep_workspace, on_event=on_event, checker=checker)


@contextmanager
def _agent_errors(agent: ExternalAgent) -> Iterator[None]:
    """The agent's or the relay's failure as the run's end: one line in the report."""
    try:
        yield
    except (AgentError, RelayError) as e:
        raise AgentFailed(agent.name, str(e)) from e


def _kept(run: GradedRun) -> Path:
    """The agent's own outputs, under the job's results folder."""
    return run.paths.report.parent / "agent"


def _rounds(task: Task, agent: ExternalAgent, launch: SessionRunner, sealed: Sealed, rounds: int, limits: Limits,
            meter: Meter, run: AgentRun, kept: Path, grade: Callable[[Candidate], Evaluation],
            on_event: Callable[[str, dict], None], start: float) -> RunExit:
    """The agent's sessions, each graded (its feedback says which files were left out of the graded change);
    why they ended (success: it stopped by itself)."""
    prompt, resume_id = agent_prompt(task), None
    why: RunExit = AgentFailed(agent.name, "no session ran")
    for n in range(1, max(1, rounds) + 1):
        session = Session(prompt, n, resume_id, sealed.home, sealed.out)
        on_event("log", {"message": f"{agent.name} session {n}"})
        began = time.monotonic()
        result = launch(session, sealed, limits.timeout_s - (began - start))
        said = agent.read_result(result.output, session)
        stderr = _keep(kept, session, result, said, run)
        round_ = AgentRound(round=n, exit_code=result.exit_code, duration_ms=round((time.monotonic() - began) * 1000),
                            claim=said.claim, own_cost_usd=said.own_cost_usd)
        run.rounds.append(round_)
        run.claim = said.claim or run.claim
        why = _session_end(agent, result, said, stderr, meter, limits)
        cand = sealed.ws.candidate()
        round_.claim_notes = claim_notes(said.claim, sealed.ws, cand.left_out)
        if cand.diff.strip():
            ev = grade(cand)
            round_.verdict, round_.evidence = ev.verdict, summarize(ev)
        else:
            round_.verdict, round_.evidence = Verdict.NO_CHANGE, "the agent left no change"
        round_.note = "" if why.subtype == "success" else why.result
        if why.subtype != "success" or round_.verdict in (Verdict.PASS, Verdict.NO_CHANGE):
            return why
        prompt, resume_id = agent.feedback(with_left_out(round_.evidence, cand.left_out)), said.session_id
    return why


def _session(agent: ExternalAgent, binary: Path, session: Session, sealed: Sealed, meter: Meter,
             time_left_s: float) -> CommandResult:
    """One sealed session: the bridge to the relay, then the agent; stderr to a file of ours."""
    stderr = session.out / f"round-{session.round}.stderr.txt"
    agent.prepare(session)
    command = (bridge_command(sys.executable, sealed.socket) + shlex.join(agent.command(session, binary))
               + f" 2> {shlex.quote(str(stderr))}")
    env = base_env({**agent.relay_env(), **agent.env(session), "HOME": str(session.home)}, bin_dir=sealed.bin_dir)
    sandbox = sealed.sandbox.with_(writable=(session.home, session.out),
                                   readable=(sealed.socket.parent, *agent.install_dirs(binary)))
    return run_command(command, sealed.ws.root, sandbox=sandbox, timeout_s=max(1.0, time_left_s), env=env,
                       max_output=MAX_AGENT_OUTPUT, cancel=meter.stopped)


def _session_end(agent: ExternalAgent, result: CommandResult, said: AgentResult, stderr: str, meter: Meter,
                 limits: Limits) -> RunExit:
    if meter.stop_reason == "budget":
        return OverBudget(meter.total_cost_usd or 0.0, limits.max_cost_usd, next_usd=meter.refused_worst_usd)
    if meter.stop_reason == "time" or result.timed_out:
        return TimedOut(limits.timeout_s)
    if result.exit_code != 0:
        return AgentFailed(agent.name,
                           f"exited with code {result.exit_code}: "
                           f"{said.error or _last_line(stderr) or _last_line(result.output) or 'no output'}")
    if said.error:
        return AgentFailed(agent.name, said.error)
    return _Finished(said.claim)


class _Finished(RunExit):
    """The agent ended its session by itself; its last words are the run's `result`."""

    subtype = "success"

    def __init__(self, claim: str):
        self.result = first_line(claim) or "the agent finished"


def _keep(kept: Path, session: Session, result: CommandResult, said: AgentResult, run: AgentRun) -> str:
    """The agent's stdout, stderr and result document under the job's results folder; its stderr's tail."""
    n = session.round
    try:
        stderr = tail((session.out / f"round-{n}.stderr.txt").read_text(encoding="utf-8", errors="replace"), 64_000)
    except OSError:
        stderr = ""
    for name, text in (("stdout", result.output), ("stderr", stderr)):
        atomic_write(kept / f"round-{n}.{name}.txt", text)
        run.files[f"round-{n}.{name}"] = f"agent/round-{n}.{name}.txt"
    if said.raw is not None:
        write_json(kept / f"round-{n}.result.json", said.raw)
        run.files[f"round-{n}.result"] = f"agent/round-{n}.result.json"
    return stderr


def _account(outcome: Outcome, meter: Meter, run: AgentRun, start: float, *, cumulative_cost: bool = False) -> None:
    """Tokens, cost and turns from the relay; the agent's own figure beside them, a difference flagged."""
    outcome.usage_by_model = dict(meter.usage_by_model)
    outcome.cost_by_model = dict(meter.cost_by_model)
    outcome.unpriced = meter.unpriced
    outcome.num_turns = meter.requests
    outcome.api_duration_s = meter.api_duration_s
    outcome.duration_s = time.monotonic() - start
    run.refused = list(meter.refused)
    run.partial = list(meter.partial)
    if run.partial:
        outcome.warnings.append(f"{len(run.partial)} answer(s) metered without their final usage (cut, hung or still "
                                "out at the end): counted from what they announced, else their worst case")
    if meter.unpriced:
        outcome.warnings.append(f"{meter.unpriced} answer(s) of a model with no known price, charged at the dearest "
                                "prices in the table: the cost is an upper bound")
    if run.refused:
        outcome.warnings.append(f"{run.name} tried to reach what the relay does not forward (refused): "
                                + ", ".join(run.refused[:5]))
    run.own_cost_usd = own_cost(run.rounds, cumulative=cumulative_cost)
    run.cost_note = cost_note(run.name, run.own_cost_usd, outcome.total_cost_usd)
    if run.cost_note:
        outcome.warnings.append(run.cost_note)


def claim_notes(claim: str, ws: Workspace, left_out: list[LeftOut]) -> list[str]:
    """What the evidence says of a commit or a file the agent's claim names: a commit that was never made
    (its .git is read-only to it), a file it names that was left out of the change (an empty patch file)."""
    notes = []
    if re.search(r"\bcommit(?:s|ted)?\b", claim, re.IGNORECASE) and ws.repo.head.commit.hexsha == ws.base_commit:
        notes.append("it speaks of a commit; none was made (the repository's .git is read-only to it): "
                     "its working tree was graded")
    for x in left_out:
        if re.search(rf"(?<![\w/.-]){re.escape(x.path)}(?![\w/-])", claim):
            size = "empty" if x.size == 0 else f"{x.size:,} bytes"
            notes.append(f"it names {x.path}: {size}, left out of the change ({x.reason})")
    return notes


def own_cost(rounds: list[AgentRound], cumulative: bool) -> float | None:
    """The agent's own figure for the whole run: its last round's where each counts the rounds before it,
    else the sum of the rounds' (None where it reported none)."""
    own = [r.own_cost_usd for r in rounds if r.own_cost_usd is not None]
    if not own:
        return None
    return own[-1] if cumulative else sum(own)


def cost_note(agent: str, own: float | None, metered: float | None) -> str:
    """'' when the agent's own cost agrees with the relay's; else one line saying how they differ."""
    if own is None or metered is None:
        return "" if own is None else f"{agent} reported ${own:.6f}; the relay could not price what it metered"
    if abs(own - metered) <= COST_TOLERANCE * max(abs(metered), abs(own)) + 1e-9:
        return ""
    pct = f" ({(own - metered) / metered:+.1%})" if metered else ""
    return f"{agent} reported ${own:.6f}; the relay metered ${metered:.6f}{pct}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return first_line(lines[-1]) if lines else ""


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path

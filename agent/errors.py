"""One error hierarchy: what perfagent raises on purpose, and the exit code each kind ends a command with.

The command line catches `PerfagentError` once, at the top (`agent.run.entry.guarded`, which every command and
every batch job process runs under): the message as one `error:` line, and the class's `exit_code`. Anything
else that reaches the top is a bug: `internal error:`, exit 1. Each class lives in the module that raises it
and derives from the kind below that says whose fault it is::

    PerfagentError                  exit 1: perfagent could not do it, for a reason it can say in one line
    ├── BadInput                    exit 2: the input is wrong (a flag, a file, a name): fix it and run again
    │   ├── UserError               agent.run.entry: a flag or argument the command itself refuses
    │   ├── TaskError               agent.task: a task file that cannot be used
    │   ├── BadName                 agent.run.names: a run id or job name that is no plain folder name (ValueError)
    │   ├── JobInUse                agent.results.layout: a live run writes that job's folder
    │   ├── ModelError              agent.models.base: a model spec, key or provider that cannot answer
    │   ├── PricingError            agent.models.pricing: a --prices file that cannot be read (ValueError)
    │   ├── AgentError              agent.agents.errors: an external agent unknown, missing or the wrong version
    │   ├── WorkspaceError          agent.env.workspace: the task's repository or base commit cannot be used
    │   ├── PatchError              agent.env.workspace: a patch that does not apply
    │   ├── CheckError              agent.checks.verdicts: the task cannot be checked as given
    │   │   └── TaskBroken          agent.checks.sides: its own commands fail on its unchanged base: exit 1
    │   ├── EvidenceError           agent.checks.evidence: nothing recorded to grade again, or not sealed here
    │   ├── BatchError              agent.batch.driver: a batch that cannot be planned or resumed
    │   ├── SubsetError             agent.batch.subset: --filter, --tasks, --slice that choose nothing sound
    │   ├── RecordsError            agent.interchange.task_import: a records file that cannot be imported at all
    │   ├── RecordError             agent.interchange.task_import: one record that cannot become a task
    │   │   └── RecordRefused       the record asks for something unsafe (its line says what)
    │   ├── ConfigError             agent.interchange.iso_bench: an ISO-Bench config that cannot be read
    │   ├── PredictionsError        agent.interchange.predictions: a predictions file that cannot be read
    │   ├── ExportError             agent.interchange.export: runs that cannot be exported
    │   ├── ReviewError             agent.review.load: a results folder that cannot be shown
    │   ├── RunsError               agent.review.runs: a folder with no runs to list
    │   ├── TrajectoryError         agent.review.trajectory: no such job or turn to step through
    │   └── LintFixError            agent.lint: `lint --fix --task` whose task cannot be checked: exit 1
    └── (a failure of the machinery, exit 1, mostly caught where it is raised and turned into a verdict or a line)
        WarmError, InterpreterError (agent.env), BenchError (agent.checks.perf), ExecutorError, KitError
        (agent.batch), RelayError (agent.agents.relay, a RuntimeError), ReportError (agent.results.report, a
        ValueError), RewriteError (agent.analyzers.rewrite, a ValueError)

Not in it, on purpose (`tests/test_layout.py` holds every other error class to it, and to this drawing): how a
run ends (`agent.run.exits`: `RunEnded` is control flow the loop catches, `Interrupted` a KeyboardInterrupt, so
Ctrl-C stays Ctrl-C), the control flow that never leaves its module (`RoundLost`, `ToolFailure`, `Refused`, the
relay's `_BadBody`, the fork server's `_BatchGone`), and `agent.util.seal.SealError` (util imports nothing of
agent; whoever reads a seal for the user says what it means, as `EvidenceError`).
"""

from __future__ import annotations

from typing import ClassVar

EXIT_BAD_INPUT = 2


class PerfagentError(Exception):
    """An error perfagent raises on purpose: its message is one line for the user."""

    exit_code: ClassVar[int] = 1


class BadInput(PerfagentError):
    """The input is wrong: fix it and run again."""

    exit_code: ClassVar[int] = EXIT_BAD_INPUT

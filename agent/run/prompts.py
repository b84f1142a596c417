"""What the harness says to the model, apart from the task's own prompt.

The prompts are template files beside this module (`str.format` fields), so they can be edited
without touching the loop: system_prompt.md for our loop, agent_prompt.md for an external agent
(the task's prompt and our rules, as its first instruction).
"""

from __future__ import annotations

from pathlib import Path

from agent.task import Task

SYSTEM_PROMPT_FILE = Path(__file__).with_name("system_prompt.md")
AGENT_PROMPT_FILE = Path(__file__).with_name("agent_prompt.md")
# Sent once when a reply makes no tool call; a second such reply ends the run.
NUDGE = "Use the tools to work on the task; call `submit` when you are done."


def agent_prompt(task: Task) -> str:
    """An external agent's first instruction for `task`."""
    return system_prompt(task, AGENT_PROMPT_FILE)


def system_prompt(task: Task, template: Path = SYSTEM_PROMPT_FILE) -> str:
    """The system prompt for `task`, rendered from `template`."""
    s = task.spec
    return template.read_text(encoding="utf-8").format(
        title=s.title or s.id, prompt=s.prompt.strip(), focus=", ".join(s.focus) or "(none given)",
        protected=", ".join(s.protected) or "(none)", correctness=s.correctness.command,
        poison="" if s.correctness.poison else " (poison mode is off for this task, but still)",
        perf=s.perf.command if s.perf else "(no perf check for this task)",
    )

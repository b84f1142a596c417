"""mini-swe-agent, headless: `mini -t TASK -m MODEL --yolo --exit-immediately -o TRAJ.json`.

It runs litellm in the sandbox, pointed at the relay by litellm's own variables (ANTHROPIC_API_BASE /
OPENAI_API_BASE and their *_BASE_URL twins). It is run with its text-based config
(`mini_textbased.yaml`, model class `litellm_textbased`: one ```mswea_bash_command block per
reply), not its default tool-calling one: litellm 1.106 imports the `mcp` package for any request
with tools, and without it every step fails and is retried for minutes. It ends when a command's
output starts with COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; its trajectory (written to our output
folder after every step) gives the claim, the exit status and its own cost, litellm's estimate,
kept beside the relay's. It has no session to resume: a feedback round is a new run in the same
workspace, told the original task and what our checks found.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from agent.agents.base import AgentResult, ExternalAgent, Session
from agent.agents.wire import Provider
from agent.models.base import DEFAULT_ANTHROPIC_MODEL

CONFIG = "mini_textbased.yaml"
MODEL_CLASS = "litellm_textbased"
COMMAND_TIMEOUT_S = 600  # one command of the agent's (its default, 30 s, is shorter than a test run)
TASK_FILE = "perfagent-task.md"  # the first round's instruction, under HOME, for the feedback rounds
SUBMITTED = "Submitted"
_FENCE = re.compile(r"```[^\n]*\n.*?```", re.DOTALL)
_THOUGHT = re.compile(r"^\s*THOUGHT:\s*", re.IGNORECASE)  # the label its text format asks replies to start with


class MiniSweAgent(ExternalAgent):
    name = "mini-swe-agent"
    binary = "mini"
    install = "pip install mini-swe-agent"
    default_model = f"anthropic/{DEFAULT_ANTHROPIC_MODEL}"
    min_version = (2, 0)  # the v2 CLI (--exit-immediately, -c specs merged) and trajectory; checked on 2.4.6
    version_args = ("--help",)  # it has no --version; its banner says it
    version_pattern = r"mini-swe-agent version (\d+(?:\.\d+)+)"

    @property
    def provider(self) -> Provider:
        """litellm's provider for the name: "anthropic/..." and bare "claude-..." are Anthropic's."""
        model = self.model.strip().lower()
        return "anthropic" if model.startswith(("anthropic/", "claude")) else "openai"

    def prepare(self, session: Session) -> None:
        """Its config folder under HOME (it creates one at import), and the task kept for later rounds."""
        config_dir(session).mkdir(parents=True, exist_ok=True)
        if session.round == 1:
            (session.home / TASK_FILE).write_text(session.prompt, encoding="utf-8")

    def command(self, session: Session, binary: Path) -> list[str]:
        return [str(binary), "-t", task_of(session), "-m", self.model, "--yolo", "--exit-immediately",
                "-l", "0",  # no cost limit of its own: the relay holds the budget
                "-c", builtin_config(binary), "-c", f"environment.timeout={COMMAND_TIMEOUT_S}",
                "--model-class", MODEL_CLASS,
                "-o", str(trajectory_path(session))]

    def env(self, session: Session) -> dict[str, str]:
        relay = self.relay_env()
        bases = {"ANTHROPIC_API_BASE": relay["ANTHROPIC_BASE_URL"]} if self.provider == "anthropic" else {
            "OPENAI_API_BASE": relay["OPENAI_BASE_URL"]}  # litellm reads *_API_BASE before *_BASE_URL
        return bases | {
            "MSWEA_CONFIGURED": "true",  # else it asks for a model and a key on first start
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(config_dir(session)),
            "MSWEA_COST_TRACKING": "ignore_errors",  # a model litellm cannot price must not end the run
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # its bundled prices, not a download at start
            "TYPER_STANDARD_TRACEBACK": "1",  # a crash's rich traceback, locals and all, takes seconds to print
            "NO_COLOR": "1",
        }

    def read_result(self, stdout: str, session: Session) -> AgentResult:
        path = trajectory_path(session)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return AgentResult(error=f"wrote no trajectory ({type(e).__name__})")
        info = doc.get("info") if isinstance(doc, dict) else None
        if not isinstance(info, dict):
            return AgentResult(raw=doc, error="its trajectory has no info")
        messages = [m for m in doc.get("messages") or [] if isinstance(m, dict)]
        cost = (info.get("model_stats") or {}).get("instance_cost")
        return AgentResult(claim=str(info.get("submission") or "").strip() or last_words(messages),
                           own_cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
                           raw=doc, error=_error(info, messages))

    def install_dirs(self, binary: Path) -> list[Path]:
        """Its venv and the Python that venv was made from (a pipx venv's may sit under a hidden home)."""
        dirs = super().install_dirs(binary)
        python = _interpreter(Path(os.path.realpath(binary)))
        if python is not None:
            dirs.append(Path(os.path.realpath(python)).parent.parent)
        return dirs


def builtin_config(binary: Path) -> str:
    """Its own text-based config by absolute path: a bare name is looked up in the workspace first,
    where a file of that name (the repo's, or one the agent wrote) would replace it."""
    venv = Path(os.path.realpath(binary)).parent.parent
    found = sorted(venv.glob(f"lib/python3*/site-packages/minisweagent/config/{CONFIG}"))
    return str(found[-1]) if found else CONFIG


def config_dir(session: Session) -> Path:
    return session.home / ".config" / "mini-swe-agent"


def trajectory_path(session: Session) -> Path:
    return session.out / f"mini-round-{session.round}.traj.json"


def task_of(session: Session) -> str:
    """Round 1: our instruction. Later: a fresh run, so the original task again, then the checks' findings."""
    first = session.home / TASK_FILE
    if session.round == 1 or not first.is_file():
        return session.prompt
    return (first.read_text(encoding="utf-8") + "\n\n---\n\nYou already worked on this task in an earlier "
            "session: your change is in the working tree (`git diff` shows it).\n\n" + session.prompt)


def last_words(messages: list[dict[str, Any]]) -> str:
    """Its last reply's prose, the command block and THOUGHT label taken out: what it said when it submitted."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return _THOUGHT.sub("", _FENCE.sub("", _text(message.get("content")))).strip()
    return ""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text") or "") for c in content if isinstance(c, dict))
    return str(content or "")


def _error(info: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """None when it submitted; else its exit status (LimitsExceeded, an exception's name) and why."""
    status = str(info.get("exit_status") or "")
    if status == SUBMITTED:
        return None
    if not status:
        return "it stopped before it finished (no exit status in its trajectory)"
    last = messages[-1] if messages and messages[-1].get("role") == "exit" else {}
    why = _text(last.get("content")).strip()
    return f"{status}: {why}" if why and why != status else status


def _interpreter(script: Path) -> Path | None:
    """The Python of a console script, from its #! line; None when it has none."""
    try:
        with script.open("rb") as f:
            head = f.readline(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    parts = head[2:].decode(errors="replace").split()
    return Path(parts[0]) if parts and parts[0].startswith("/") and "python" in Path(parts[0]).name else None

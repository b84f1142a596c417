"""Claude Code, headless: `claude -p PROMPT --output-format json`, resumed with `--resume ID`.

It refuses `--dangerously-skip-permissions` as root; `--permission-mode bypassPermissions` with
IS_SANDBOX=1 runs, and is safe here because our sandbox, not its permission prompts, is the
boundary. Its result JSON is the shape our report.json keeps; its `total_cost_usd` is its own
estimate, kept beside the relay's figure (after a resume, of the whole session so far).
"""

from __future__ import annotations

from pathlib import Path

from agent.agents.base import AgentResult, ExternalAgent, Session, last_json_line
from agent.models.base import DEFAULT_ANTHROPIC_MODEL

# Its background tasks and the "haiku" alias a subagent may name: 2.1.330 sends claude-haiku-5-5, which the
# price table lacks, so it is pinned to a priced Haiku (and the relay forwards no other). The "opus" and
# "sonnet" aliases (2.1.330: claude-opus-5-5, ...) are pinned to the run's model.
SIDE_MODEL = "claude-haiku-4-5"


class ClaudeCode(ExternalAgent):
    name = "claude-code"
    binary = "claude"
    install = "npm install -g @anthropic-ai/claude-code"
    default_model = DEFAULT_ANTHROPIC_MODEL
    min_version = (2, 0)
    cumulative_cost = True  # `total_cost_usd` after `--resume` is the session's, earlier rounds included
    side_models = (SIDE_MODEL,)

    def command(self, session: Session, binary: Path) -> list[str]:
        argv = [str(binary), "-p", session.prompt, "--output-format", "json", "--model", self.model,
                "--permission-mode", "bypassPermissions"]
        return argv + (["--resume", session.resume_id] if session.resume_id else [])

    def env(self, session: Session) -> dict[str, str]:
        return {"IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "CLAUDE_CONFIG_DIR": str(session.home / ".claude"),
                "ANTHROPIC_SMALL_FAST_MODEL": SIDE_MODEL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": SIDE_MODEL,
                "ANTHROPIC_DEFAULT_SONNET_MODEL": self.model, "ANTHROPIC_DEFAULT_OPUS_MODEL": self.model}

    def read_result(self, stdout: str, session: Session) -> AgentResult:
        doc = last_json_line(stdout, {"type": "result"})
        if doc is None:
            return AgentResult(error="printed no result JSON")
        cost = doc.get("total_cost_usd")
        return AgentResult(claim=str(doc.get("result") or ""),
                           own_cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
                           session_id=doc.get("session_id") if isinstance(doc.get("session_id"), str) else None,
                           raw=doc, error=f"{doc.get('subtype')}: {doc.get('result') or ''}".strip(": ")
                           if doc.get("is_error") else None)

"""Codex CLI, headless: `codex exec --json PROMPT`, resumed with `codex exec resume ID PROMPT`.

Codex speaks OpenAI's Responses API (POST /v1/responses, streamed). It is pointed at the relay by
a model provider of its own in $CODEX_HOME/config.toml (`base_url`, the key from OPENAI_API_KEY,
`wire_api = "responses"`); `--dangerously-bypass-approvals-and-sandbox` runs its commands without
its prompts or its own sandbox, which is safe because ours is the boundary. Its JSONL events give
the thread id (to resume), its last message (the claim) and its own token count; it reports no
dollar cost, so the relay's figure stands alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.agents.base import AgentResult, ExternalAgent, Session, json_lines
from agent.agents.wire import Provider

PROVIDER_ID = "perfagent"
# What each setting prevents, tried on codex 0.169 (`--strict-config` accepts them all):
# - allow_login_shell: its shell tool runs `bash -lc` by default, and /etc/profile resets PATH, hiding
#   the task's Python from the agent;
# - web_search, plugins, apps: searches from OpenAI's servers, and calls to github.com and chatgpt.com
#   that the relay would refuse and report;
# - unbounded_connection_retries: a relay that stopped answering (budget spent) ends the session;
# - supports_websockets: the relay forwards HTTP only.
CONFIG = """\
# Written by perfagent for one sealed run: Codex's only network is the metering relay.
model_provider = "{provider}"
model = {model}
allow_login_shell = false
web_search = "disabled"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
unbounded_connection_retries = false

[model_providers.{provider}]
name = "perfagent relay"
base_url = {base_url}
env_key = "OPENAI_API_KEY"
wire_api = "responses"
supports_websockets = false
"""


class Codex(ExternalAgent):
    name = "codex"
    binary = "codex"
    install = "npm install -g @openai/codex"
    default_model = "gpt-5"
    min_version = (0, 169)  # the config keys and JSONL events above were checked on 0.169

    @property
    def provider(self) -> Provider:
        return "openai"

    def prepare(self, session: Session) -> None:
        """Its config: the relay as its one model provider, and nothing that reaches elsewhere."""
        home = codex_home(session)
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(CONFIG.format(provider=PROVIDER_ID, model=json.dumps(self.model),
                                                        base_url=json.dumps(self.relay_env()["OPENAI_BASE_URL"])))

    def command(self, session: Session, binary: Path) -> list[str]:
        flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-m", self.model]
        resume = ["resume", *flags, "--", session.resume_id] if session.resume_id else [*flags, "--"]
        return [str(binary), "exec", *resume, session.prompt]  # after `--`: a leading dash stays an argument

    def env(self, session: Session) -> dict[str, str]:
        return {"CODEX_HOME": str(codex_home(session)), "NO_COLOR": "1"}

    def read_result(self, stdout: str, session: Session) -> AgentResult:
        events = json_lines(stdout)
        if not events:
            return AgentResult(error="printed no JSON events")
        thread = next((e.get("thread_id") for e in events if e.get("type") == "thread.started"), None)
        messages = [item.get("text") for item in _completed_items(events) if item.get("type") == "agent_message"]
        end = next((e for e in reversed(events) if e.get("type") in ("turn.completed", "turn.failed")), None)
        usage = end.get("usage") if end is not None and isinstance(end.get("usage"), dict) else None
        return AgentResult(claim=next((str(m) for m in reversed(messages) if m), ""),
                           session_id=thread if isinstance(thread, str) else None, raw=end,
                           error=_error(events, end), extra={"usage": usage} if usage else {})


def codex_home(session: Session) -> Path:
    """Its state (config, sessions to resume) under the run's HOME, kept across rounds."""
    return session.home / ".codex"


def _completed_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e.get("type") == "item.completed" and isinstance(e.get("item"), dict)]


def _error(events: list[dict[str, Any]], end: dict[str, Any] | None) -> str | None:
    """Why its turn failed (or never ended); None when it completed. Its `error` items are warnings."""
    if end is not None and end.get("type") == "turn.completed":
        return None
    if end is not None and isinstance(end.get("error"), dict):
        return _unwrap(str(end["error"].get("message") or "its turn failed"))
    last = next((e.get("message") for e in reversed(events) if e.get("type") == "error"), None)
    return _unwrap(str(last)) if last else "its turn never completed"


def _unwrap(message: str) -> str:
    """The API's own message when Codex passes on an error body whole (`{"error": {"message": ...}}`)."""
    try:
        body = json.loads(message)
    except ValueError:
        return message
    error = body.get("error") if isinstance(body, dict) else None
    return str(error["message"]) if isinstance(error, dict) and error.get("message") else message

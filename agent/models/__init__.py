"""Model providers behind one small protocol (see base.py): Anthropic, OpenAI-compatible, replay.

Providers only: agent.run.model_spec.make_model picks one from a spec string (and knows the
offline policies, which this package never imports). The provider SDKs take ~2 s to import,
so anthropic.py and openai.py load only when a spec names them.
"""

from __future__ import annotations

from .base import DEFAULT_ANTHROPIC_MODEL, DEFAULT_MAX_RETRIES, Model, ModelError, Reply, ToolCall, Usage
from .replay import ReplayModel

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_MAX_RETRIES",
    "Model",
    "ModelError",
    "ReplayModel",
    "Reply",
    "ToolCall",
    "Usage",
]

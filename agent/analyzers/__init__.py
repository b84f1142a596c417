"""Static performance rules for Python/PyTorch inference code, built on libcst.

Used by `perfagent lint` and by the offline `rules` policy, which proposes the
zero-init-buffer rewrites one by one and lets the poison-memory tests decide.

    findings = analyze_paths([repo], root=repo)
    safe = [f for f in findings if f.safe_to_rewrite]
    new_source = apply_rewrites(source, safe[:1])      # exactly that one rewrite

Rules: see RULES. Columns are 1-based, like lines.
"""

from .findings import RULES, AnalyzerConfig, Finding, findings_json, findings_table
from .rewrite import RewriteError, apply_rewrites
from .engine import DEFAULT_EXCLUDE, analyze_paths, analyze_source

__all__ = [
    "RULES", "AnalyzerConfig", "DEFAULT_EXCLUDE", "Finding", "RewriteError", "analyze_paths", "analyze_source",
    "apply_rewrites", "findings_json", "findings_table",
]

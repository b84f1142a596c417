"""Findings for people (a rich table) and for programs (plain dicts), used by `perfagent lint`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterable

from rich.markup import escape
from rich.table import Table

from .model import Finding


def findings_table(findings: Iterable[Finding], title: str | None = None) -> Table:
    findings = list(findings)
    table = Table(title=title or f"{len(findings)} finding(s)", show_lines=False)
    table.add_column("location", overflow="fold", no_wrap=False)
    table.add_column("rule", style="cyan")
    table.add_column("function")
    table.add_column("finding", overflow="fold")
    table.add_column("fix")
    for f in findings:
        text = escape(f.message)
        if f.hazard:
            text += f"\n[yellow]hazard:[/] {escape(f.hazard)}"
        fix = "[green]safe[/]" if f.safe_to_rewrite else "[yellow]hazard[/]" if f.fixable else "-"
        table.add_row(escape(f.location), f.rule, escape(f.function or ""), text, fix)
    return table


def findings_json(findings: Iterable[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]

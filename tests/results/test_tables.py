"""agent.results.tables: a cost nobody priced reads "unpriced" in every table, never $0.0000.

A graded prediction (or a model with no price) has no cost: summed as 0 it looked free beside the
"(+4 unpriced)" of its model's row."""

from __future__ import annotations

from helpers import rec

from agent.results.summary import summarize
from agent.results.tables import sections, summary_markdown


def _cells(recs) -> dict[str, dict[tuple[str, ...], dict[str, str]]]:
    """Each table's rows by their leading names (model, or task and model), as {column: cell}."""
    out = {}
    for title, cols, rows in sections(summarize(recs, run_id="r")):
        key = "task" if cols[0] == "task" else title.split(": ", 1)[1].split(" ", 1)[0]
        n = 2 if cols[0] == "task" else 1
        out[key] = {row[:n]: dict(zip(cols, row)) for row in rows}
    return out


def test_a_cost_nobody_priced_reads_unpriced_not_zero():
    recs = [rec("a", "prediction:gold", 0, cost_usd=None), rec("b", "prediction:gold", 0, cost_usd=None),
            rec("a", "m", 0, cost_usd=0.5), rec("b", "m", 0, cost_usd=None), rec("a", "rules", 0, cost_usd=0.0)]
    cells = _cells(recs)
    spend, tasks = cells["spend"], cells["task"]
    assert spend[("prediction:gold",)]["cost"] == "unpriced" and spend[("prediction:gold",)]["cost/job"] == "unpriced"
    assert tasks[("a", "prediction:gold")]["cost"] == "unpriced" == tasks[("b", "prediction:gold")]["cost"]
    # some priced, some not: the known part, and how many are left out of it
    assert spend[("m",)]["cost"] == "$0.5000 (+1 unpriced)" and spend[("m",)]["cost/job"] == "$0.5000"
    assert tasks[("a", "m")]["cost"] == "$0.5000" and tasks[("b", "m")]["cost"] == "unpriced"
    # free is free: the offline policy's $0 is a price
    assert spend[("rules",)]["cost"] == "$0.0000" and tasks[("a", "rules")]["cost"] == "$0.0000"
    assert "$0.0000 (+" not in summary_markdown(summarize(recs, run_id="r"))

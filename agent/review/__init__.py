"""agent.review's face: its names load lazily (PEP 562), each command only the module that shows its view.

Reading results back: load a results folder once, then show it in the terminal or as one HTML page."""

from typing import TYPE_CHECKING

from agent.util.lazy import lazy_names

if TYPE_CHECKING:
    from agent.review.compare import render_compare
    from agent.review.dump import compare_json, review_json
    from agent.review.html import write_html
    from agent.review.load import load_results, several_runs
    from agent.review.runs import runs_text
    from agent.review.terminal import render_review
    from agent.review.trajectory import show_trajectory
else:
    __getattr__ = lazy_names(__name__, {
        "compare_json": "agent.review.dump", "load_results": "agent.review.load",
        "render_compare": "agent.review.compare", "render_review": "agent.review.terminal",
        "review_json": "agent.review.dump", "runs_text": "agent.review.runs", "several_runs": "agent.review.load",
        "show_trajectory": "agent.review.trajectory", "write_html": "agent.review.html"})

__all__ = ["compare_json", "load_results", "render_compare", "render_review", "review_json", "runs_text",
           "several_runs", "show_trajectory", "write_html"]

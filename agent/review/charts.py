"""The report's charts, drawn with svg.py: per run the perf samples on one axis with their medians,
the ratio's interval on an axis through 1.0 and where the run's time went; per batch the speedups as
points with whiskers beside a visible 1.0 line and the reference per task (never bars from 0), the
cost per contestant, and each run's cost against its speedup."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from markupsafe import Markup

from agent.results.summary import BatchSummary
from agent.checks.evaluation import Evaluation
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.review.analytics import Timeline
from agent.review.load import Results, RunView
from agent.review.rows import contestant, fmt_speedup, fmt_usd, run_outcome
from agent.review.svg import (PALETTE, Scale, diamond, doc, domain, esc, legend, nice_ticks, one_line, text,
                              whisker, x_axis, y_axis)

SIDE_COLORS = {"baseline": "#5f6368", "candidate": "#3366cc", "reference": "#ff9900"}
TIME_COLORS = {"model": "#3366cc", "tests": "#109618", "perf": "#ff9900", "lock": "#dc3912", "checks": "#0099c6",
               "other": "#bdbdbd"}


# -- one run: its samples, its ratio's interval, its time --------------------------------------------
def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def sample_svg(ev: Evaluation | None) -> Markup | None:
    """Baseline, candidate and reference samples as dots on one axis, one dot per sample, each median a bar."""
    perf = ev.perf if ev is not None else None
    if perf is None:
        return None
    ref = ev.reference if ev is not None else None
    sides = [("baseline", _finite(perf.baseline_samples), perf.baseline_median),
             ("candidate", _finite(perf.candidate_samples), perf.candidate_median)]
    if ref is not None and ref.samples:
        sides.append(("reference", _finite(ref.samples), None))
    sides = [(n, vs, m if m is not None and math.isfinite(m) else _median(vs)) for n, vs, m in sides]
    values = [v for _, vs, _ in sides for v in vs]
    if not values:
        return None
    width, left, right, top, row = 720, 92, 150, 18, 42
    scale, ticks, decimals = domain(values)
    scale.a, scale.b = left, width - right
    axis_y = top + row * len(sides) + 6
    unit = f" ({perf.unit})" if perf.unit else ""
    body = x_axis(scale, ticks, decimals, top, axis_y, f"{perf.metric}{unit}, {perf.direction} is better")
    for i, (name, vs, median) in enumerate(sides):
        y, color = top + row * i + row / 2, SIDE_COLORS[name]
        body.append(f'<g class="side" data-side="{name}" data-n="{len(vs)}">')
        body.append(text(left - 8, y + 4, name, anchor="end", weight="600", fill=color))
        for j, v in enumerate(vs):
            jitter = ((j * 0.618034) % 1 - 0.5) * row * 0.55  # spread equal values apart, the same on every render
            body.append(f'<circle class="sample" data-side="{name}" data-value="{v:.6g}" cx="{scale(v)}" '
                        f'cy="{y + jitter:.1f}" r="4" fill="{color}" fill-opacity="0.55" stroke="{color}"/>')
        if median is not None:
            x = scale(median)
            body.append(f'<line class="median" data-side="{name}" data-value="{median:.6g}" x1="{x}" x2="{x}" '
                        f'y1="{y - row * 0.42:.1f}" y2="{y + row * 0.42:.1f}" stroke="#202124" stroke-width="2.5"/>')
            body.append(text(width - right + 8, y + 4, f"median {median:.4g}{' ' + perf.unit if perf.unit else ''}",
                             size=11, cls="median-label"))
            body.append(text(width - right + 8, y + 17, f"n={len(vs)}", size=10, fill="#5f6368"))
        body.append("</g>")
    return doc(width, axis_y + 40, body, f"perf samples: {perf.metric}", "chart samples")


def perf_verdict(ev: Evaluation | None) -> str:
    """The perf verdict in the words the checks use, or why there is none."""
    if ev is None:
        return "no evaluation"
    if ev.verdict == Verdict.NO_CHANGE:
        return Verdict.NO_CHANGE
    p = ev.perf
    if p is None:
        return "not measured"
    if p.error:
        return "perf error"
    return p.verdict or PerfVerdict.INCONCLUSIVE


def ratio_svg(ev: Evaluation | None) -> Markup | None:
    """The ratio candidate/baseline with its interval on an axis through 1.0; the reference's beside it."""
    p = ev.perf if ev is not None else None
    if p is None or p.ratio is None:
        return None
    rows = [("candidate", p.ratio, p.ci_low, p.ci_high, SIDE_COLORS["candidate"])]
    ref = ev.reference if ev is not None else None
    if ref is not None and ref.ratio is not None:
        rows.append(("reference", ref.ratio, ref.ci_low, ref.ci_high, SIDE_COLORS["reference"]))
    values = [v for _, r, lo, hi, _ in rows for v in (r, lo, hi) if v is not None]
    width, left, right, top, row = 720, 92, 150, 26, 34
    scale, ticks, decimals = domain(values, through_one=True)
    scale.a, scale.b = left, width - right
    axis_y = top + row * len(rows) + 4
    better = "<1 is faster" if p.direction == "lower" else ">1 is faster"
    body = x_axis(scale, ticks, decimals, top, axis_y, f"ratio candidate / baseline ({better}), "
                  f"{p.confidence:.0%} interval")
    body += one_line(scale, top, axis_y, "1.0 = no change")
    for i, (name, r, lo, hi, color) in enumerate(rows):
        y = top + row * i + row / 2
        body.append(text(left - 8, y + 4, name, anchor="end", weight="600", fill=color))
        if lo is not None and hi is not None:
            body += whisker(scale, lo, hi, y, color, name)
        body.append(f'<circle class="estimate" data-side="{name}" data-value="{r:.6g}" cx="{scale(r)}" cy="{y}" '
                    f'r="5" fill="{color}" stroke="#202124"/>')
        iv = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
        body.append(text(width - right + 8, y + 4, f"{r:.3f}{iv}", size=11, cls="ratio-label"))
    p_text = f", p={p.p_value:.3g}" if p.p_value is not None else ""
    caption = f"{perf_verdict(ev)} · {p.n_pairs} pairs{p_text}"
    body.append(text(left, axis_y + 52, caption, size=13, weight="600", cls="verdict",
                     fill={"faster": "#137333", "slower": "#c5221f"}.get(perf_verdict(ev), "#a56300")))
    return doc(width, axis_y + 62, body, f"ratio with its interval: {caption}", "chart ratio")


def _secs(s: float) -> str:
    return f"{s:.1f}s" if s < 120 else f"{s / 60:.1f}m"


def timeline_svg(tl: Timeline) -> Markup:
    """One bar of the run's time, split by part to scale; a legend of every part with its share."""
    parts, total = tl.parts, tl.total_s
    width, left, right, top, bar = 720, 10, 10, 8, 30
    scale = Scale(0, total, left, width - right)
    body, x = [], float(left)
    for p in parts:
        w = scale(p.seconds) - left
        if w <= 0:
            continue
        body.append(f'<rect class="seg" data-part="{p.key}" data-seconds="{p.seconds:.2f}" x="{x:.2f}" y="{top}" '
                    f'width="{w:.2f}" height="{bar}" fill="{TIME_COLORS[p.key]}">'
                    f'<title>{esc(p.label)}: {_secs(p.seconds)}</title></rect>')
        if w > 44:
            body.append(text(x + w / 2, top + bar / 2 + 4, _secs(p.seconds), size=11, anchor="middle", fill="#fff",
                             weight="600"))
        x += w
    y = top + bar + 22
    col = (width - left) / 2
    for i, p in enumerate(parts):  # the legend: every part, even an empty one (0s of lock waits is news too)
        lx, ly = left + col * (i % 2), y + 18 * (i // 2)
        body.append(f'<rect x="{lx:.1f}" y="{ly - 10}" width="12" height="12" fill="{TIME_COLORS[p.key]}"/>')
        share = p.seconds / total if total else 0
        body.append(text(lx + 17, ly, f"{p.label}: {_secs(p.seconds)} ({share:.0%})", size=11, cls="legend"))
    return doc(width, y + 18 * ((len(parts) + 1) // 2) + 4, body, f"where the run's time went ({_secs(total)})",
               "chart timeline")


# -- the batch: speedups against 1.0 with their intervals, cost ------------------------------------------
@dataclass
class Chart:
    title: str
    svg: Markup | None
    note: str = ""  # said instead of (or under) the chart
    wide: bool = False


def _reference_speedup(run: RunView) -> float | None:
    ref = run.evaluation.reference if run.evaluation is not None else None
    return ref.speedup if ref is not None and ref.speedup is not None and math.isfinite(ref.speedup) else None


def reference_interval(run: RunView) -> tuple[float, float] | None:
    """The reference patch's speedup interval (>1 is better), turned from its ratio's as the run's own is."""
    ref = run.evaluation.reference if run.evaluation is not None else None
    p = run.perf
    if ref is None or p is None or ref.ci_low is None or ref.ci_high is None or not 0 < ref.ci_low <= ref.ci_high \
            or not math.isfinite(ref.ci_high):
        return None
    return (1 / ref.ci_high, 1 / ref.ci_low) if p.direction == "lower" else (ref.ci_low, ref.ci_high)


def task_reference(runs: list[RunView]) -> tuple[float, tuple[float, float] | None] | None:
    """A task's reference as its runs measured it: the median measurement (the upper one of an even count, as the
    summary's "ref. speedup" is) with that measurement's interval."""
    measured = sorted(((v, reference_interval(r)) for r in runs if (v := _reference_speedup(r)) is not None),
                      key=lambda m: m[0])
    return measured[len(measured) // 2] if measured else None


def _colors(results: Results) -> dict[str, str]:
    models = dict.fromkeys(contestant(r.model, r.agent) for r in sorted(results.runs, key=lambda r: r.model))
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}


def speedup_svg(results: Results) -> Markup | None:
    """One row per run: its speedup (>1 is better) with its interval as whiskers, on an axis through 1.0;
    the reference patch's speedup marked per task, its interval shaded. Runs with no measurement say so on their row."""
    runs = sorted((r for r in results.runs if not r.pending),
                  key=lambda r: (r.task, contestant(r.model, r.agent), r.sample, r.key))
    if not runs:
        return None
    color = _colors(results)
    labels = [f"{r.task} · {contestant(r.model, r.agent)} · s{r.sample}" for r in runs]
    left = min(420, 12 + 6.6 * max(len(x) for x in labels))
    width, right, top, row, gap = 1000, 220, 34, 26, 10
    values: list[float] = []
    for r in runs:
        values += [v for v in (r.speedup, _reference_speedup(r), *(r.interval or ()), *(reference_interval(r) or ()))
                   if v is not None]
    scale, ticks, decimals = domain(values, through_one=True)
    scale.a, scale.b = left, width - right
    ys: list[float] = []
    y, prev = float(top), None
    for r in runs:
        if prev is not None and r.task != prev:
            y += gap
        ys.append(y + row / 2)
        y += row
        prev = r.task
    axis_y = y + 6
    body = [f'<rect x="{left:.1f}" y="{top}" width="{scale.b - left:.1f}" height="{axis_y - top:.1f}" fill="#fafafa"/>']
    body += x_axis(scale, ticks, decimals, top, axis_y, "speedup (x, >1 is faster), 95% interval")
    body += one_line(scale, top, axis_y, "1.0 = no change")
    for task in dict.fromkeys(r.task for r in runs):  # the reference, once per task, across its rows
        rows_ = [(r, yy) for r, yy in zip(runs, ys) if r.task == task]
        measured = task_reference([r for r, _ in rows_])
        if measured is None:
            continue
        ref, iv = measured
        x, y0, y1 = scale(ref), rows_[0][1] - row / 2 + 2, rows_[-1][1] + row / 2 - 2
        said = f"{ref:.3f}x" + (f", 95% interval [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else ", no interval measured")
        if iv is not None:  # the interval as a band across the task's rows: a run's whisker inside it is no faster
            x0, x1 = scale(iv[0]), scale(iv[1])
            body.append(f'<rect class="reference-interval" data-task="{esc(task)}" data-lo="{iv[0]:.6g}" '
                        f'data-hi="{iv[1]:.6g}" x="{x0}" y="{y0:.1f}" width="{max(x1 - x0, 1.0):.2f}" '
                        f'height="{y1 - y0:.1f}" fill="{SIDE_COLORS["reference"]}" fill-opacity="0.2" '
                        f'stroke="{SIDE_COLORS["reference"]}" stroke-opacity="0.6" stroke-dasharray="3 2">'
                        f'<title>reference patch on {esc(task)}: {said}</title></rect>')
        body.append(f'<line class="reference" data-task="{esc(task)}" data-value="{ref:.6g}" x1="{x}" x2="{x}" '
                    f'y1="{y0:.1f}" y2="{y1:.1f}" stroke="{SIDE_COLORS["reference"]}" stroke-width="3" '
                    f'stroke-opacity="0.8"><title>reference patch on {esc(task)}: {said}</title></line>')
        body.append(diamond(x, y0, 5, SIDE_COLORS["reference"], "reference-mark"))
    for r, label, yy in zip(runs, labels, ys):
        c = color[contestant(r.model, r.agent)]
        body.append(text(left - 8, yy + 4, label, size=12, anchor="end", cls="row-label"))
        outcome = run_outcome(r)
        if r.speedup is None or not math.isfinite(r.speedup):
            body.append(text(width - right + 10, yy + 4, f"no measurement ({outcome})", size=11, fill="#5f6368",
                             cls="missing"))
            continue
        if r.interval is not None:
            body += whisker(scale, r.interval[0], r.interval[1], yy, c, r.key)
        correct = outcome == Verdict.PASS
        body.append(f'<circle class="speedup" data-key="{esc(r.key)}" data-value="{r.speedup:.6g}" '
                    f'cx="{scale(r.speedup)}" cy="{yy}" r="5" fill="{c if correct else "#fff"}" stroke="{c}" '
                    f'stroke-width="2"><title>{esc(r.key)}: {esc(fmt_speedup(r))}, {esc(outcome)}</title></circle>')
        body.append(text(width - right + 10, yy + 4, f"{r.speedup:.3f}x" + ("" if correct else f" ({outcome})"),
                         size=11, cls="value-label", fill="#202124" if correct else "#c5221f"))
    ly = axis_y + 52
    keys, lx = legend(color, float(left), ly)
    body += keys
    if lx + 140 > width:  # no room left on the line: the next keys on a line of their own
        lx, ly = 12.0, ly + 18
    body.append(f'<circle cx="{lx + 5:.1f}" cy="{ly - 4}" r="5" fill="#fff" stroke="#5f6368" stroke-width="2"/>')
    body.append(text(lx + 14, ly, "hollow: not correct", size=11, cls="legend"))
    lx += 140
    if lx + 330 > width:
        lx, ly = 12.0, ly + 18
    body.append(diamond(lx + 5, ly - 4, 5, SIDE_COLORS["reference"], "legend-ref"))
    body.append(text(lx + 14, ly, "reference patch (per task), shaded: its 95% interval", size=11, cls="legend"))
    return doc(width, ly + 10, body, "speedup per run with 95% intervals, through 1.0", "chart speedups")


def costs_all_zero(results: Results) -> bool:
    """Every run that reported cost nothing: the offline policy, no model to pay."""
    costs = [r.cost_usd for r in results.runs if r.record is not None]
    return all(c is not None and c == 0 for c in costs)


def cost_bars_svg(summary: BatchSummary) -> Markup | None:
    """One bar per contestant, its cost stacked by task, each part and the total labelled in dollars."""
    tasks = sorted({t.task for t in summary.tasks})
    models = [m.model for m in summary.models]
    if not tasks or not models:
        return None
    cost = {(t.task, t.model): t.cost_usd for t in summary.tasks}
    color = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(tasks)}
    width, height, left, right, top, bottom = 640, 360, 64, 20, 24, 86
    ticks, decimals = nice_ticks(0, max(sum(cost.get((t, m)) or 0 for t in tasks) for m in models) or 0.01)
    scale = Scale(ticks[0], ticks[-1], height - bottom, top)
    body = [f'<rect x="{left}" y="{top}" width="{width - right - left}" height="{height - bottom - top}" '
            'fill="#fafafa"/>']
    body += y_axis(scale, ticks, decimals, left, width - right, "cost (USD)")
    body.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}" '
                'stroke="#5f6368"/>')
    slot = (width - right - left) / len(models)
    bar = min(80.0, slot * 0.6)
    for i, m in enumerate(models):
        x, base = left + slot * i + (slot - bar) / 2, 0.0
        for t in tasks:
            v = cost.get((t, m)) or 0.0
            if v <= 0:
                continue
            y0, y1 = scale(base), scale(base + v)
            body.append(f'<rect class="bar" data-model="{esc(m)}" data-task="{esc(t)}" data-value="{v:.6g}" '
                        f'x="{x:.1f}" y="{y1}" width="{bar:.1f}" height="{y0 - y1:.2f}" fill="{color[t]}">'
                        f'<title>{esc(t)}, {esc(contestant(m))}: ${v:.3f}</title></rect>')
            if y0 - y1 >= 16:
                body.append(text(x + bar / 2, (y0 + y1) / 2 + 4, f"${v:.3f}", size=11, anchor="middle", fill="#fff",
                                 cls="value-label"))
            base += v
        body.append(text(x + bar / 2, scale(base) - 5, f"${base:.3f}", size=11, anchor="middle", weight="600",
                         cls="total-label"))
        body.append(text(x + bar / 2, height - bottom + 16, contestant(m), size=11, anchor="middle", cls="x-label"))
    keys, _ = legend(color, float(left), height - 22)
    return doc(width, height, body + keys, "cost per contestant, stacked by task", "chart cost-bars")


def cost_vs_speedup_svg(results: Results) -> Markup | None:
    """Each run's cost against its speedup (with its interval), a 1.0 line across."""
    pts = [r for r in results.runs if r.cost_usd is not None and r.speedup is not None and math.isfinite(r.speedup)]
    if not pts:
        return None
    color = _colors(results)
    width, height, left, right, top, bottom = 640, 360, 64, 20, 20, 86
    xs, xd = nice_ticks(0, max(r.cost_usd or 0 for r in pts) or 0.01)
    yv: list[float] = [1.0]
    for r in pts:
        yv += [r.speedup, *(r.interval or ())]
    y_scale, yt, yd = domain(yv)
    x_scale = Scale(xs[0], xs[-1], left, width - right)
    y_scale.a, y_scale.b = height - bottom, top
    body = [f'<rect x="{left}" y="{top}" width="{width - right - left}" height="{height - bottom - top}" '
            'fill="#fafafa"/>']
    body += x_axis(x_scale, xs, xd, top, height - bottom, "cost (USD)")
    body += y_axis(y_scale, yt, yd, left, width - right, "speedup (x)")
    y1 = y_scale(1.0)
    body.append(f'<line class="one" data-value="1" x1="{left}" x2="{width - right}" y1="{y1}" y2="{y1}" '
                'stroke="#202124" stroke-width="1.5" stroke-dasharray="5 3"/>')
    body.append(text(left + 4, y1 - 4, "1.0 = no change", size=11, cls="one-label", weight="600"))
    for r in pts:
        c, x = color[contestant(r.model, r.agent)], x_scale(r.cost_usd or 0)
        if r.interval is not None:
            lo, hi = y_scale(r.interval[0]), y_scale(r.interval[1])
            body.append(f'<line class="whisker" data-key="{esc(r.key)}" x1="{x}" x2="{x}" y1="{lo}" y2="{hi}" '
                        f'stroke="{c}" stroke-width="1.5"/>')
        body.append(f'<circle class="point" data-key="{esc(r.key)}" cx="{x}" cy="{y_scale(r.speedup)}" r="5" '
                    f'fill="{c}" fill-opacity="0.8"><title>{esc(r.key)}: {fmt_usd(r.cost_usd)}, '
                    f'{esc(fmt_speedup(r))}</title></circle>')
    keys, _ = legend(color, float(left), height - 22)
    return doc(width, height, body + keys, "each run: cost against speedup", "chart cost-speedup")


def charts(results: Results) -> list[Chart]:
    """The speedups against 1.0 with intervals and the reference; the cost by contestant and task, and
    each run's cost against its speedup, or one line when no run cost anything."""
    s = results.summary
    out = [Chart("speedup per run, 95% intervals, reference patch per task", speedup_svg(results), wide=True)]
    if costs_all_zero(results):
        out.append(Chart("cost", None, "no model cost ($0): every run used an offline policy (such as rules), "
                                       "so there is no spend to chart"))
        return out
    out.append(Chart("cost per model, stacked by task (USD)", cost_bars_svg(s)))
    out.append(Chart("each run: cost (USD) against speedup", cost_vs_speedup_svg(results)))
    return out

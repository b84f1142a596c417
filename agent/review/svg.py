"""The SVG kit the report's charts are drawn with: escaped text, linear scales, axes whose ticks come
from the data, and a few marks, as plain strings. Hand-written so each chart says exactly what it
must (ticks with enough decimals to differ, a visible 1.0, intervals as whiskers) and the page needs
no script."""

from __future__ import annotations

import math
from dataclasses import dataclass

from markupsafe import Markup, escape

PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477")


def nice_ticks(lo: float, hi: float, target: int = 5) -> tuple[list[float], int]:
    """Ticks at 1/2/2.5/5 x 10^k covering [lo, hi], and the decimals that keep their labels distinct.

    A range of 1.005..1.015 gets 1.004, 1.006, ... rather than five labels that all read "1.01".
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo < 1e-12:
        pad = abs(lo) * 0.05 or 0.5
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first = math.floor(lo / step + 1e-9) * step
    ticks, i = [], 0
    while True:
        t = first + i * step
        ticks.append(round(t, 12))
        if t >= hi - step * 1e-9:
            break
        i += 1
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6:  # 2.5, 0.25: one more digit
        decimals += 1
    return ticks, decimals


def tick_label(v: float, decimals: int) -> str:
    return f"{v:.{decimals}f}"


@dataclass
class Scale:
    """A linear axis: data [lo, hi] onto pixels [a, b]."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return round(self.a + (v - self.lo) / span * (self.b - self.a), 2)


def domain(values: list[float], *, through_one: bool = False) -> tuple[Scale, list[float], int]:
    """A scale (pixels still to set) and ticks covering the finite values, 1.0 too when asked."""
    vals = [v for v in values if v is not None and math.isfinite(v)] + ([1.0] if through_one else [])
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    pad = (hi - lo) * 0.04
    ticks, decimals = nice_ticks(lo - pad, hi + pad)
    return Scale(ticks[0], ticks[-1], 0, 0), ticks, decimals


def esc(text: object) -> str:
    return str(escape(str(text)))


def text(x: float, y: float, content: object, *, size: int = 12, anchor: str = "start", cls: str = "",
         fill: str = "#202124", weight: str = "normal") -> str:
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}"{c}>{esc(content)}</text>')


def doc(width: int, height: float, body: list[str], label: str, cls: str) -> Markup:
    """The whole <svg>, sized by its viewBox, labelled for screen readers."""
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" viewBox="0 0 {width} {height:.0f}" '
                  f'width="{width}" height="{height:.0f}" role="img" aria-label="{esc(label)}" '
                  f'font-family="system-ui, sans-serif">' + "".join(body) + "</svg>")


def x_axis(scale: Scale, ticks: list[float], decimals: int, y_top: float, y_axis: float, title: str) -> list[str]:
    """Grid lines and tick labels along the bottom, and the axis title under them."""
    out = [f'<line class="axis" x1="{scale.a}" x2="{scale.b}" y1="{y_axis}" y2="{y_axis}" stroke="#5f6368"/>']
    for t in ticks:
        x = scale(t)
        out.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{y_top}" y2="{y_axis}" stroke="#e8eaed"/>')
        out.append(text(x, y_axis + 15, tick_label(t, decimals), size=11, anchor="middle", cls="tick", fill="#5f6368"))
    out.append(text((scale.a + scale.b) / 2, y_axis + 33, title, size=12, anchor="middle", cls="axis-title",
                    fill="#3c4043"))
    return out


def y_axis(scale: Scale, ticks: list[float], decimals: int, x_left: float, x_right: float, title: str) -> list[str]:
    """Grid lines and tick labels up the left side, and the axis title turned along it."""
    out = []
    for t in ticks:
        y = scale(t)
        out.append(f'<line class="grid" x1="{x_left}" x2="{x_right}" y1="{y}" y2="{y}" stroke="#e8eaed"/>')
        out.append(text(x_left - 6, y + 4, tick_label(t, decimals), size=11, anchor="end", cls="tick ytick",
                        fill="#5f6368"))
    mid = (scale.a + scale.b) / 2
    out.append(f'<text x="16" y="{mid}" font-size="12" text-anchor="middle" fill="#3c4043" class="axis-title" '
               f'transform="rotate(-90 16 {mid})">{esc(title)}</text>')
    return out


def one_line(scale: Scale, y_top: float, y_bottom: float, label: str = "1.0") -> list[str]:
    """The dashed vertical line at 1.0 (no change), labelled above."""
    x = scale(1.0)
    return [f'<line class="one" data-value="1" x1="{x}" x2="{x}" y1="{y_top}" y2="{y_bottom}" stroke="#202124" '
            f'stroke-width="1.5" stroke-dasharray="5 3"/>', text(x, y_top - 4, label, size=11, anchor="middle",
                                                                 cls="one-label", fill="#202124", weight="600")]


def whisker(scale: Scale, lo: float, hi: float, y: float, color: str, key: str) -> list[str]:
    """An interval: a line between its ends and a cap at each end (data-lo / data-hi carry the values)."""
    x1, x2 = scale(lo), scale(hi)
    k = f' data-key="{esc(key)}"'
    return [f'<line class="whisker"{k} data-lo="{lo:.6g}" data-hi="{hi:.6g}" x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" '
            f'stroke="{color}" stroke-width="2"/>',
            f'<line class="cap"{k} data-value="{lo:.6g}" x1="{x1}" x2="{x1}" y1="{y - 6}" y2="{y + 6}" '
            f'stroke="{color}" stroke-width="2"/>',
            f'<line class="cap"{k} data-value="{hi:.6g}" x1="{x2}" x2="{x2}" y1="{y - 6}" y2="{y + 6}" '
            f'stroke="{color}" stroke-width="2"/>']


def diamond(x: float, y: float, r: float, color: str, cls: str, extra: str = "") -> str:
    return (f'<path class="{cls}"{extra} d="M{x:.1f},{y - r:.1f} L{x + r:.1f},{y:.1f} L{x:.1f},{y + r:.1f} '
            f'L{x - r:.1f},{y:.1f} Z" fill="{color}" stroke="#202124" stroke-width="1"/>')


def legend(entries: dict[str, str], x: float, y: float) -> tuple[list[str], float]:
    """A row of colored dots with their names; also where the row ends, for more entries after it."""
    body = []
    for name, color in entries.items():
        body.append(f'<circle cx="{x + 5:.1f}" cy="{y - 4:.1f}" r="5" fill="{color}"/>')
        body.append(text(x + 14, y, name, size=11, cls="legend"))
        x += 30 + 6.2 * len(name)
    return body, x

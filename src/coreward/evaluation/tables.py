"""Markdown tables in the layout of the Cooper paper's main table.

    | Model | Metric | GSM8K | SVAMP | MATH500 | OB-EN | Odyssey | Average |

The five paper benchmarks come first in the paper's order (only those evaluated), any others after them
in the order given; values are percentages with two decimals, as the paper prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


DISPLAY_NAMES = {
    "gsm8k": "GSM8K",
    "svamp": "SVAMP",
    "math500": "MATH500",
    "olympiadbench": "OB-EN",
    "mathodyssey": "Odyssey",
    "aime24": "AIME24",
    "amc23": "AMC23",
    "math": "MATH",
    "demo": "Demo",
}
PAPER_ORDER = ("gsm8k", "svamp", "math500", "olympiadbench", "mathodyssey")


def column_order(names: Sequence[str]) -> list[str]:
    """Paper benchmarks in the paper's order, then the rest as given."""
    return [b for b in PAPER_ORDER if b in names] + [b for b in names if b not in PAPER_ORDER]


def render_table(rows: Sequence[tuple[str, str, dict[str, float]]]) -> str:
    """Rows of (model label, metric name, {benchmark: fraction}); Average = mean over the row's benchmarks."""
    benchmarks = column_order(list(dict.fromkeys(b for _, _, values in rows for b in values)))
    header = ["Model", "Metric", *(DISPLAY_NAMES.get(b, b) for b in benchmarks), "Average"]
    lines = [_line(header), _line(["---"] * 2 + ["---:"] * (len(header) - 2))]
    for label, metric, values in rows:
        cells = [f"{100 * values[b]:.2f}" if b in values else "–" for b in benchmarks]
        average = sum(values.values()) / len(values) if values else None
        lines.append(_line([label, metric, *cells, "–" if average is None else f"{100 * average:.2f}"]))
    return "\n".join(lines)


def results_table(results: Any, label: str | None = None) -> str:
    """One evaluation: a row per metric (avg@n, pass@n, maj@n; agree@n and answered for benchmarks without
    reference answers). pass@1 is left out: it equals avg@n."""
    label = label or results.model
    # pass@1 equals avg@n, and with n = 1 so does maj@1
    metrics = dict.fromkeys(m for r in results.benchmarks.values() for m in r.metrics() if m not in ("pass@1", "maj@1"))
    rows = [(label, m, {name: r.metrics()[m] for name, r in results.benchmarks.items() if m in r.metrics()})
            for m in metrics]
    return render_table(rows)


def comparison_table(runs: dict[str, Any], metric: str = "avg") -> str:
    """Several evaluations side by side, one row each (e.g. the demo policy before and after RL)."""
    rows = []
    for label, results in runs.items():
        name = f"{metric}@{results.settings['n']}"
        rows.append((label, name, {b: r.metrics()[name] for b, r in results.benchmarks.items() if name in r.metrics()}))
    return render_table(rows)


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n − 1; 0 for one value) of per-seed results."""
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, var ** 0.5


def spread_cell(value: float | Sequence[float | None] | None, scale: float = 1.0, digits: int = 1,
                sign: bool = False) -> str:
    """A table cell for one result or per-seed results: `x`, or `mean ± std` over seeds; `–` when missing."""
    if isinstance(value, (list, tuple)):
        values = [v for v in value if v is not None]
        if len(values) != len(value) or not values:
            return "–"
        mean, std = mean_std([scale * v for v in values])
        return f"{mean:{'+' if sign else ''}.{digits}f} ± {std:.{digits}f}"
    return "–" if value is None else f"{scale * value:{'+' if sign else ''}.{digits}f}"

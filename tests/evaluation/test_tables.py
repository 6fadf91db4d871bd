"""Table cells for per-seed results."""

import statistics

import pytest

from coreward.evaluation.tables import mean_std, spread_cell


@pytest.mark.parametrize("values", [[0.5], [0.25, 0.75], [0.1, 0.4, 0.4, 0.9]])
def test_mean_std_is_the_sample_statistics(values):
    mean, std = mean_std(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert std == pytest.approx(statistics.stdev(values) if len(values) > 1 else 0.0)


def test_spread_cell_formats_one_value_or_seeds_and_marks_missing():
    assert spread_cell(0.4567, 100) == "45.7"
    assert spread_cell([0.25, 0.75], 100) == f"50.0 ± {100 * statistics.stdev([0.25, 0.75]):.1f}"
    assert spread_cell([0.02, 0.04], 100, sign=True).startswith("+3.0 ± ")
    assert spread_cell(None) == spread_cell([None, None]) == spread_cell([0.5, None]) == "–"

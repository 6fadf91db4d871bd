"""Box scanning and thousands separators: the copies other packages import."""

from __future__ import annotations

import time

from coreward.verify import THOUSANDS, boxes, drop_thousands_separators, last_boxed


def test_boxes_in_order_with_nesting_and_escapes():
    text = "a \\boxed{x^{2}} b \\fbox{\\{1, 2\\}} c \\boxed 5$ d \\boxed{\\boxed{3}} e \\boxed{open"
    assert [b.content for b in boxes(text)] == ["x^{2}", "\\{1, 2\\}", "5", "\\boxed{3}", None]
    assert last_boxed(text) is None and last_boxed("\\boxed{1} \\boxed{2}") == "2" and last_boxed("none") is None


def test_scanning_is_linear():
    start = time.process_time()  # CPU time: on a machine shared with other jobs, wall time measures the load
    assert all(b.content is None for b in boxes("\\boxed{" * 200_000))
    assert time.process_time() - start < 2.0


def test_thousands_separators():
    assert drop_thousands_separators("1,234,567") == "1234567"
    assert drop_thousands_separators("-12,345.5") == "-12345.5"
    for not_one in ("32, 349", "1000,99", "-2,1", "1,22"):
        assert THOUSANDS.fullmatch(not_one) is None and drop_thousands_separators(not_one) == not_one

"""`extract_boxed_raw`: the Co-rewarding authors' raw last-\\boxed{} extraction, quirks included."""

from __future__ import annotations

import pytest

from coreward.verify.extract import MAX_ANSWER_CHARS, extract_answer, extract_boxed_raw


@pytest.mark.parametrize("text, expected", [
    (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),                 # nested braces kept raw, not cleaned
    (r"\boxed{3} then \boxed{ 5 }", " 5 "),                      # the last box, whitespace kept
    (r"\boxed{3.0}", "3.0"),                                      # no numeric cleaning
    (r"\boxed{a} then \boxed 9$ more", "9"),                     # `\boxed ` anywhere wins, cut at `$`
    ("#### 5", None),                                             # no #### fallback
    ("The answer is 5.", None),                                   # no "the answer is" fallback
    (r"\fbox{3}", None),                                          # their remove_boxed asserts `\boxed{`
    (r"\boxed{3", None),                                          # unclosed
    (r"\boxed{}", None),                                          # empty: no vote
    ("", None),
])
def test_boxed_raw_follows_the_authors(text, expected):
    assert extract_boxed_raw(text) == expected


def test_boxed_raw_differs_from_the_default_where_the_issue_says():
    assert extract_answer("#### 5") == "5" and extract_boxed_raw("#### 5") is None


def test_boxed_raw_is_bounded_on_hostile_text():
    assert extract_boxed_raw("\\boxed{" + "{" * 5 * MAX_ANSWER_CHARS) is None
    assert extract_boxed_raw("\\boxed{" + "x" * (2 * MAX_ANSWER_CHARS) + "}") is None

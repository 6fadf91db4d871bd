"""The demo RM's held-out pairs: the shipped asset file is what the code makes."""

from __future__ import annotations

from coreward.demo.rows import demo_eval_rows, write_rows
from coreward.rm.labelled import read_labelled
from coreward.runtime.assets import shipped_path


def test_shipped_heldout_pairs_match_the_generator(tmp_path):
    shipped = shipped_path("demo", "rm_pairs")
    assert shipped.read_text() == write_rows(tmp_path / "rows.jsonl").read_text(), \
        "regenerate it: python -m coreward.demo.rows"
    rows = read_labelled(shipped)
    assert len(rows) == 400 and sum(r["label"] for r in rows) == 200
    assert rows == [{**r, "label": int(r["label"])} for r in demo_eval_rows()]

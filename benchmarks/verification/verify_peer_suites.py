"""Agreement with other graders' own test cases: coreward's verifier vs math-verify used alone.

    python -m benchmarks.verification.verify_peer_suites /work/peer_cases [--markdown]

The cases are other projects' data and stay out of this repository. The directory holds `*.jsonl` files,
one case per line:

    {"suite": "math-verify", "category": "boxed", "gold": "$004$", "pred": "... \\boxed{004}", "expected": true}

`gold` is the reference answer (it may carry `$...$` or a box), `pred` a completion or a bare answer,
`expected` the peer's own label, and an optional `options` names the `Verifier` keywords of the convention
the case tests (`{"decimal_comma": true}`: see collect_peer_cases.py, which writes these files). coreward scores `pred` the way training does
(`Verifier.verify_completions`, the same path as `coreward verify`). "math-verify alone" is
`verify(parse(gold in a box), parse(pred))` with math-verify's default extraction, each call under its own
5 s timeout. Prints, per suite and category, the number of cases and how many each agrees with:
coreward with its defaults, coreward with the convention option the case names (the default verdict where
it names none), and math-verify alone.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from pathlib import Path

from coreward.verify import Verifier


def load_cases(directory: Path) -> list[dict]:
    cases = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row.get("gold") is not None:
                    cases.append({**row, "pred": row.get("pred") or ""})
    return cases


def math_verify_alone(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    inner = gold.strip()
    if inner.startswith("$") and inner.endswith("$"):
        inner = inner.strip("$")
    boxed = inner if "\\boxed" in inner else f"\\boxed{{{inner}}}"
    try:
        return bool(verify(parse(f"${boxed}$"), parse(pred)))
    except Exception:  # noqa: BLE001 - math-verify's policy: an error is "not equal"
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", type=Path, help="directory of *.jsonl case files")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--show-misses", action="store_true", help="list the cases coreward gets wrong")
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    cases = load_cases(args.cases)
    with Verifier(num_workers=2) as verifier:
        ours = [r.correct for r in verifier.verify_completions([c["pred"] for c in cases], [c["gold"] for c in cases])]
    with_option = list(ours)
    for options in {json.dumps(c["options"], sort_keys=True) for c in cases if c.get("options")}:
        chosen = [i for i, c in enumerate(cases) if json.dumps(c.get("options"), sort_keys=True) == options]
        with Verifier(num_workers=2, **json.loads(options)) as verifier:
            results = verifier.verify_completions([cases[i]["pred"] for i in chosen], [cases[i]["gold"] for i in chosen])
        for i, result in zip(chosen, results):
            with_option[i] = result.correct
    theirs = [math_verify_alone(c["gold"], c["pred"]) for c in cases]
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for case, mine, optioned, alone in zip(cases, ours, with_option, theirs):
        for key in ((case["suite"], case["category"]), (case["suite"], "(all)"), ("all suites", "(all)")):
            row = table[key]
            row[0] += 1
            row[1] += mine == case["expected"]
            row[2] += optioned == case["expected"]
            row[3] += alone == case["expected"]
        if args.show_misses and mine != case["expected"]:
            note = f" (right with {case['options']})" if optioned == case["expected"] else ""
            print(f"MISS {case['suite']}/{case['category']} expected={case['expected']}{note} gold={case['gold']!r} "
                  f"pred={case['pred'][-200:]!r}")
    rows = sorted(table.items(), key=lambda kv: (kv[0][0] == "all suites", kv[0][0], kv[0][1] != "(all)", kv[0][1]))
    if args.markdown:
        print("| suite | category | cases | coreward (defaults) | coreward (case's convention option) "
              "| math-verify alone |\n|---|---|---:|---:|---:|---:|")
        for (suite, category), (n, mine, optioned, alone) in rows:
            print(f"| {suite} | {category} | {n} | {mine} | {optioned} | {alone} |")
    else:
        print(f"{'suite':14} {'category':36} {'cases':>6} {'coreward':>9} {'+option':>8} {'math-verify':>12}")
        for (suite, category), (n, mine, optioned, alone) in rows:
            print(f"{suite:14} {category:36} {n:6d} {mine:9d} {optioned:8d} {alone:12d}")


if __name__ == "__main__":
    main()

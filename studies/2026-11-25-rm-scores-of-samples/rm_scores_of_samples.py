"""How a reward model scores a policy's evaluation samples: is it paying for wrong answers?

    python benchmarks/studies/rm_scores_of_samples.py runs/demo/eval/stress-model/samples.parquet [--rm demo]

Reads the samples an evaluation wrote (`coreward eval` / `coreward demo`: prompt, gold, completion, correct) and
prints the share verified correct, the RM's mean score, and the share of the *wrong* samples it scores above 0.5
(rewards a policy trained on this RM would collect for wrong answers).
"""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("samples", help="a samples.parquet written by an evaluation")
    parser.add_argument("--rm", default="demo", help="an RM directory, or 'demo' (the shipped demo RM)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import pandas as pd

    from coreward.rm.model import VerifyRM

    samples = pd.read_parquet(args.samples)
    rm = VerifyRM.from_pretrained(args.rm, device="cpu")
    scores = pd.Series(rm.score(samples.prompt.tolist(), samples.gold.astype(str).tolist(),
                                samples.completion.tolist()), index=samples.index)
    wrong = scores[~samples.correct]
    print(f"{args.samples}: {len(samples)} samples, verified correct {samples.correct.mean():.3f}, "
          f"RM mean score {scores.mean():.3f}, wrong samples scored > 0.5: {(wrong > 0.5).mean():.3f}")


if __name__ == "__main__":
    main()

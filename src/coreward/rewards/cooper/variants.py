"""Cooper's variants (ours, not the paper's): other pairs, a replay of past pairs, and a co-optimized ensemble.
Each is a setting of `cooper` (rewards.N.params); the defaults are the authors' method (rewards/cooper/reward.py).

    positive: hardest     o⁺ = the accepted o_i of lowest r_i (the positive the RM likes least)
    negative: rollout     o⁻ = the rule-rejected o_i of highest r_i: the policy's own wrong answer the RM is most
                          fooled by (no rejected o_i with a finite score → no pair)
    negative: mixed       both negatives per positive: the assistant's pair and the rollout pair (each when it exists),
                          so a prompt gives up to two pairs
    replay_size: N,       a buffer of the last N valid pairs of earlier steps; each step's update learns its own pairs
    replay_per_step: m    and m pairs drawn from the buffer (uniformly, without replacement, seeded by `seed` and the
                          step, so a resumed run draws the same), then adds its own pairs to the buffer (oldest out).
                          The buffer is saved with the RM's checkpoint (cooper_replay.json): resume is exact.
    members: K,           K RMs θ_1..θ_K (copies of `rm`, or member_rms; each its own AdamW), the reward their min
    member_split          r_i = min_k σ(f_θk(q, a, o_i)); member k learns its share of the step's pairs: "disjoint"
                          (a seeded shuffle dealt round-robin: each pair to one member) or "bootstrap" (n draws with
                          replacement from the n pairs, per member). Pairs are made from the min (positive: hardest and
                          negative: rollout read it). Memory: each member's weights, masters, moments (`coreward plan`).
    member_rms            the RMs members 1..K-1 start from instead of copies of `rm` (K-1 of them, in order; each
                          named as `rm` is: a directory, a hub id, "demo:1"), so the ensemble starts from K different
                          RMs, as a frozen `model` ensemble's `path: [demo, "demo:1", "demo:2"]` does
    anchor: λ             (rewards/cooper/learner.py) L(θ) = L_BT(θ) + (λ/2)·‖θ − θ_0‖², θ_0 the RM the run started from.

Why: under stress the verified positives thin out and the RM fits the assistant's rewrites while its ranking of the
policy's own rollouts falls (docs/results.md). Rollout negatives teach it what the policy fools it with now;
replay keeps earlier steps' pairs in the loss; the anchor keeps it near the RM that ranked well; the ensemble's min
pays a completion only what its most doubtful member grants.
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from coreward.rewards.cooper.learner import Pair
from coreward.rewards.ensemble import combine_scores, log_members
from coreward.rm.evaluate import score_unique


REPLAY_FILE = "cooper_replay.json"
MEMBER_DIR = "cooper_member{k}"  # member k ≥ 1's learner (member 0 is the RM of `rm/`, as with one RM)


@dataclass
class VariantSettings:
    """Cooper's variant settings (`rewards/cooper/reward.py`'s Params extend this class); the defaults are the authors'."""

    replay_size: int = 0  # pairs of earlier steps kept for replay (0: none, the authors')
    replay_per_step: int = 0  # pairs drawn from the replay buffer into each step's update
    members: int = 1  # RMs co-optimized together, the reward their min (1: one RM, the authors')
    member_split: Literal["disjoint", "bootstrap"] = "disjoint"  # how a step's pairs are shared among the members
    member_rms: list[str] | None = None  # the RMs members 1..K-1 start from, in order (default: copies of `rm`)

    def validate_variants(self) -> None:
        for name, least in (("replay_size", 0), ("replay_per_step", 0), ("members", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")
        if self.replay_per_step and not self.replay_size:
            raise ValueError(f"replay_per_step {self.replay_per_step} needs a buffer: set replay_size > 0")
        if self.member_rms is not None:
            if len(self.member_rms) != self.members - 1:
                raise ValueError(f"member_rms names {len(self.member_rms)} RM(s), but members {self.members} needs "
                                 f"{self.members - 1}: one for each member after the first (member 0 starts from `rm`)")
            for i, name in enumerate(self.member_rms):
                if not str(name).strip():
                    raise ValueError(f"member_rms.{i} is empty: each names an RM, as `rm` does")

    def member_starts(self) -> list[str]:
        """The RM each member 0..K-1 starts from (`rm`: the Params' of rewards/cooper/reward.py); a resumed run loads the
        checkpoint's instead."""
        return [self.rm, *(self.member_rms if self.member_rms is not None else [self.rm] * (self.members - 1))]


def hardest_positive(accepted: list[int], scores: list[float]) -> int:
    """The accepted row the RM likes least (the first of equals; NaN scores last)."""
    return min(accepted, key=lambda i: (math.isnan(scores[i]), scores[i]))


def rollout_negatives(correct: list[bool], scores: list[float], G: int, groups: list[int]) -> dict[int, int]:
    """Per group of `groups`, the row of its rule-rejected rollout the RM scores highest (finite scores only);
    a group with none is left out."""
    negatives = {}
    for group in groups:
        rejected = [i for i in range(group * G, group * G + G) if not correct[i] and math.isfinite(scores[i])]
        if rejected:
            negatives[group] = max(rejected, key=lambda i: scores[i])  # the wrong answer the RM is most fooled by
    return negatives


class ReplayBuffer:
    """The last `size` pairs of earlier steps, each with the step that made it."""

    def __init__(self, size: int):
        self.entries: deque[tuple[int, Pair]] = deque(maxlen=size)

    def draw(self, count: int, seed: int, step: int) -> list[tuple[int, Pair]]:
        """Up to `count` (step, pair) entries, without replacement, the same on every process and on resume."""
        entries = list(self.entries)
        return random.Random(seed * 1_000_003 + step).sample(entries, min(count, len(entries)))

    def add(self, pairs: list[Pair], step: int) -> None:
        self.entries.extend((step, pair) for pair in pairs)

    def save(self, directory: Path) -> None:
        rows = [{"step": step, **asdict(pair)} for step, pair in self.entries]
        (Path(directory) / REPLAY_FILE).write_text(json.dumps(rows))

    def load(self, directory: Path) -> None:
        """The buffer a checkpoint saved (none saved: it stays empty)."""
        path = Path(directory) / REPLAY_FILE
        if path.is_file():
            self.entries.clear()
            for row in json.loads(path.read_text()):
                step = row.pop("step")
                self.entries.append((step, Pair(**row)))


def member_shares(count: int, members: int, split: str, seed: int, step: int) -> list[list[int]]:
    """Which of a step's `count` pairs each member learns: disjoint shares of a seeded shuffle, or a bootstrap."""
    rng = random.Random(seed * 1_000_003 + step + 7)
    if split == "bootstrap":
        return [[rng.randrange(count) for _ in range(count)] if count else [] for _ in range(members)]
    order = list(range(count))
    rng.shuffle(order)
    return [order[k::members] for k in range(members)]


class CooperVariants:
    """The variants' state in a Cooper source (mixed in before `RMOwner`): the replay buffer and the ensemble's
    other members, built on first use and saved / loaded with the RM's checkpoint."""

    _replay: ReplayBuffer | None = None
    _others: list | None = None  # members 1..K-1's RMLearners (member 0 is `self.learner`)
    _others_from: Path | None = None

    def replay(self) -> ReplayBuffer:
        if self._replay is None:
            self._replay = ReplayBuffer(self.params.replay_size)
        return self._replay

    def member_learners(self, policy=None) -> list:
        """Every co-optimized RM's learner: `get_learner`'s, then members 1..K-1 (each from its `member_rms` entry, by
        default a copy of `rm`; resumed: the checkpoint's)."""
        from coreward.rewards.cooper.learner import RMLearner
        from coreward.rm.model import VerifyRM
        from coreward.runtime.errors import CorewardError

        first, p = self.get_learner(policy), self.params
        if self._others is None:
            if p.members > 1 and first.sharding is not None:
                raise CorewardError(f"reward {self.name!r}: key {self.config_key}.params.members: a co-optimized "
                                    "ensemble is not supported for an RM sharded like the policy: give the RM a "
                                    "device of its own (`device: cuda:1`)")
            self._others = []
            for k, start in enumerate(p.member_starts()[1:], start=1):
                saved = self._others_from / MEMBER_DIR.format(k=k) if self._others_from is not None else None
                if saved is not None and saved.is_dir():
                    learner = RMLearner.load(saved, first.rm.device, p.rm_dtype, p, rm_options=p.rm_options())
                else:  # resolved as `rm` is (runtime/assets.py: a directory, a hub id, "demo:1")
                    rm = VerifyRM.from_pretrained(start, device=first.rm.device, dtype=p.rm_dtype,
                                                  batch_size=p.batch_size, **p.rm_options())
                    learner = RMLearner(rm, p)
                learner.rm.use_cut(p.rm_cut)
                self._others.append(learner)
        return [first, *self._others]

    def score_members(self, triples: list[tuple[str, str, str]], batch) -> list[float]:
        """Step 1: σ of the RM's logit; with `members` K > 1, the min over the K members (each logged)."""
        learners = self.member_learners(batch.policy)
        member_scores = [score_unique(learner.rm, triples) for learner in learners]
        if len(learners) == 1:
            return member_scores[0]
        scores, spread = combine_scores(member_scores, "min")
        log_members(batch, member_scores, spread, prefix="rm")
        return scores

    def learn(self, pairs: list[Pair], batch) -> None:
        """Step 4 for every member, after the replay's pairs join this step's: the one RM learns all the pairs
        (the authors'); K members each their share (`member_split`)."""
        p, learners = self.params, self.member_learners(batch.policy)
        if p.replay_size:
            drawn = self.replay().draw(p.replay_per_step, p.seed, batch.step)
            self.replay().add(pairs, batch.step)
            batch.log("rm/replay_pairs", float(len(drawn)))
            pairs = pairs + [pair for _, pair in drawn]
        shares = member_shares(len(pairs), len(learners), p.member_split, p.seed, batch.step)
        for k, (learner, share) in enumerate(zip(learners, shares)):
            if batch.policy is not None:
                learner.set_learning_rate(batch.step, batch.policy.max_steps)
            for name, value in learner.update([pairs[i] for i in share] if len(learners) > 1 else pairs).items():
                batch.log(name if k == 0 else name.replace("rm/", f"rm/member{k}/", 1), value)

    def save_state(self, directory: Path) -> None:
        from coreward.runtime.distributed import world

        super().save_state(directory)
        if world()[0] != 0:
            return
        for k, learner in enumerate(self._others or [], start=1):
            (Path(directory) / MEMBER_DIR.format(k=k)).mkdir(parents=True, exist_ok=True)
            learner.save(Path(directory) / MEMBER_DIR.format(k=k))
        if self._replay is not None:
            self._replay.save(directory)

    def load_state(self, directory: Path) -> None:
        super().load_state(directory)
        self._others, self._others_from = None, Path(directory)
        self.replay().load(directory)

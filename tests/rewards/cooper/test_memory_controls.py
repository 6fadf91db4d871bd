"""The reward model's memory settings (rewards/cooper/learner.py, rm/model.py): each lowers the measured peak of the RM's update
(or says honestly what a CPU cannot show) and leaves the update the same, up to float tolerance.

The RM is a random Qwen2-architecture VerifyRM (hidden 256, 4 layers, the demo tokenizer's vocabulary), trained on
4 pairs of digit texts of 100-290 tokens. A peak is the resident high-water mark (VmHWM, reset through
/proc/self/clear_refs just before the phase) above the resident memory at its start, in a process of its own for
each variant (forked from the forkserver: glibc keeps memory a previous variant freed, which would hide the next
one's allocations).
"""

from __future__ import annotations

import logging
import random

import pytest
import torch

from coreward.rewards.cooper.learner import Pair, RMLearner
from coreward.rm.model import VerifyRM, plan_passes
from coreward.runtime.errors import CorewardError
from coreward.runtime.resident import peak_of


LR = 1e-3  # large enough that one AdamW step moves every weight with a gradient visibly
MB = 1 << 20


def build_rm(dtype: torch.dtype = torch.float32, hidden: int = 256, layers: int = 4, **options) -> VerifyRM:
    """The test's RM, the same random weights on every call (wider, for the optimizer step's test)."""
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from coreward.demo.model import build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=2, max_position_embeddings=1024, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Qwen2ForSequenceClassification(config).to(dtype)
    return VerifyRM(model, tokenizer, **{"device": "cpu", "max_length": 1024, **options})


SHORT = (30, 60, 40, 50)  # the pairs of the tests that only compare results
TINY = (22, 24, 23, 21)  # the optimizer step's test: its bf16 passes are slow where the CPU lacks native bf16


def pairs(lengths: tuple[int, ...] = (120, 250, 160, 220)) -> list[Pair]:
    """Pairs of digit texts (one token a digit), of different lengths, so a token budget sorts and splits them."""
    rng = random.Random(0)

    def digits(n: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(n))

    return [Pair(f"{i}+{i}=", str(2 * i), digits(n), digits(n - 20)) for i, n in enumerate(lengths)]


class AllAtOnce(RMLearner):
    """The optimizer step as it was: every master's float32 gradient made first, then one AdamW step over all."""

    def _optimizer_step(self) -> None:
        if self.masters is None:
            self.optimizer.step()
            return
        for master, p in zip(self.masters, self.parameters):
            master.grad = p.grad.detach().to(master.device, torch.float32) if p.grad is not None else None
        self.optimizer.step()
        with torch.no_grad():
            for master, p in zip(self.masters, self.parameters):
                p.copy_(master.to(p.device, p.dtype))


def whole_tensor_norms(learner: RMLearner, before: list[torch.Tensor]) -> dict[str, float]:
    """The update norms as they were: a float64 copy of each whole tensor (and of its difference) at once."""
    sums = torch.zeros(2, dtype=torch.float64)
    for now, old in zip(learner.parameters, before, strict=True):
        now = now.detach().double()
        sums[0] += (now - old.double()).pow(2).sum()
        sums[1] += now.pow(2).sum()
    return {"rm/update_norm": float(sums[0].sqrt()), "rm/weight_norm": float(sums[1].sqrt())}


def one_update(variant: str, out: str) -> None:
    """In a process of its own: one update of `pairs()` by the variant's learner; writes its peak (of the whole
    update, or of the optimizer step alone for the step variants) and the weights after."""
    import ctypes

    # a fixed mmap threshold (M_MMAP_THRESHOLD = -3): glibc would raise it as large blocks are freed and keep freed
    # memory for reuse; with it, big tensors are mapped and unmapped, and the resident memory follows what is live
    ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)
    peaks = []
    if variant.startswith("norms_"):  # the update-norm logging's own peak, over a 16.8M-element (67 MB) weight
        rm = build_rm(hidden=2048, layers=1, max_length=64)
        learner = RMLearner(rm, lr=LR, batch_size=8)
        before = learner._snapshot()
        with torch.no_grad():
            for p in learner.parameters:
                p.add_(1e-3)
        norms = learner._update_norms if variant == "norms_chunked" else lambda old: whole_tensor_norms(learner, old)
        metrics = {}
        peaks.append(peak_of(lambda: metrics.update(norms(before))))
        torch.save({"peak": peaks[-1], "metrics": metrics}, out)
        return
    if variant.startswith("step_"):  # a bf16 RM with float32 masters, 29M parameters; the optimizer step's own peak
        rm = build_rm(torch.bfloat16, hidden=1024, layers=2, max_length=32)
        learner = (AllAtOnce if variant == "step_all_at_once" else RMLearner)(rm, lr=LR, batch_size=8)
        step = learner._optimizer_step
        learner._optimizer_step = lambda: peaks.append(peak_of(step))
        learner.update(pairs(TINY))  # the first step makes AdamW's moments: the second's peak is the step's own
        metrics = learner.update(pairs(TINY))  # (short texts: the step's peak is the parameters', not the passes')
    else:
        rm = build_rm(max_tokens_per_pass=600 if variant == "token_budget" else None)
        learner = RMLearner(rm, lr=LR, batch_size=8, gradient_checkpointing=variant == "checkpointing")
        metrics = {}
        peaks.append(peak_of(lambda: metrics.update(learner.update(pairs()))))
    torch.save({"peak": peaks[-1], "weights": dict(learner.rm.model.named_parameters()), "masters": learner.masters,
                "metrics": metrics}, out)


def run_variants(variants: list[str], tmp_path) -> dict[str, dict]:
    from coreward.runtime import forkserver

    ctx, results = forkserver.context(), {}
    for variant in variants:
        out = str(tmp_path / f"{variant}.pt")
        with forkserver.main_module_hidden():
            process = ctx.Process(target=one_update, args=(variant, out))
            process.start()
        process.join(600)  # a hang guard, wide enough for bf16 passes on a CPU without native bf16 beside other tests
        running = process.exitcode is None
        if running:
            process.kill()
            process.join()
        assert not running and process.exitcode == 0, f"{variant}: exit code {process.exitcode}, killed: {running}"
        results[variant] = torch.load(out, weights_only=False)
    return results


def assert_same_weights(ours: dict, theirs: dict, atol: float) -> None:
    for name, value in ours.items():
        assert torch.allclose(value.float(), theirs[name].float(), atol=atol, rtol=0), name


def test_checkpointing_and_the_token_budget_lower_the_updates_peak_and_keep_its_result(tmp_path):
    runs = run_variants(["plain", "checkpointing", "token_budget"], tmp_path)
    plain = runs["plain"]
    start = dict(build_rm().model.named_parameters())
    moved = torch.cat([(plain["weights"][n] - start[n]).flatten() for n in start]).norm()
    for variant in ("checkpointing", "token_budget"):
        run = runs[variant]
        # the activations of 8 sequences × ~200 tokens × 4 layers are most of the update's peak: checkpointing
        # keeps each layer's input only, the budget of 600 tokens takes one pair per pass
        assert run["peak"] < plain["peak"] - 60 * MB, (variant, run["peak"] / MB, plain["peak"] / MB)
        # the same loss, gradient (its norm: a scale error would show, which AdamW's first step would hide) and step
        for name in ("rm/loss", "rm/grad_norm", "rm/score_pos", "rm/score_neg"):
            assert run["metrics"][name] == pytest.approx(plain["metrics"][name], rel=1e-5), (variant, name)
        # AdamW's first step is lr × g/(|g| + eps): where a gradient is ~eps, float noise moves a weight by a part
        # of lr; the update as a whole is the same
        apart = torch.cat([(run["weights"][n] - plain["weights"][n]).flatten() for n in start]).norm()
        assert apart < 1e-3 * moved, (variant, float(apart), float(moved))


def test_the_optimizer_step_one_tensor_at_a_time_holds_less_and_steps_the_same(tmp_path):
    runs = run_variants(["step_per_tensor", "step_all_at_once"], tmp_path)
    ours, theirs = runs["step_per_tensor"], runs["step_all_at_once"]
    masters_bytes = sum(m.numel() * 4 for m in theirs["masters"])  # one float32 gradient per master, made at once
    assert theirs["peak"] > 0.5 * masters_bytes  # the old step's float32 gradients, all held together
    assert ours["peak"] < theirs["peak"] - 0.5 * masters_bytes, (ours["peak"] / MB, theirs["peak"] / MB)
    for a, b in zip(ours["masters"], theirs["masters"], strict=True):  # the same AdamW, to the bit on a CPU
        assert torch.allclose(a, b, atol=1e-7, rtol=0)
    assert_same_weights(ours["weights"], theirs["weights"], atol=0)


def test_a_float32_rm_steps_one_tensor_at_a_time_like_adamw_over_all():
    """A float32 RM without masters: on a CPU torch's AdamW loops over tensors anyway (its multi-tensor `foreach`
    temporaries, which one tensor at a time avoids, are a CUDA default), so only the result is checked here."""
    ours, theirs = RMLearner(build_rm(layers=2), lr=LR, batch_size=8), AllAtOnce(build_rm(layers=2), lr=LR, batch_size=8)
    for _ in range(2):  # the second step reads the moments and step counts the first left
        ours.update(pairs(SHORT))
        theirs.update(pairs(SHORT))
    assert_same_weights(dict(ours.rm.model.named_parameters()), dict(theirs.rm.model.named_parameters()), atol=1e-7)
    assert ours.optimizer.state_dict()["state"].keys() == theirs.optimizer.state_dict()["state"].keys()


def test_plan_passes_keeps_to_the_budget_and_sorts_by_length():
    lengths = [300, 40, 900, 120, 60, 2000, 80]
    passes = plan_passes(lengths, max_rows=4, max_tokens=600)
    assert sorted(i for rows in passes for i in rows) == list(range(len(lengths)))  # every item once
    for rows in passes:
        assert len(rows) <= 4
        assert len(rows) == 1 or len(rows) * max(lengths[i] for i in rows) <= 600
    assert [lengths[rows[0]] for rows in passes] == sorted(lengths[rows[0]] for rows in passes)  # shortest first
    assert [5] in passes and [2] in passes  # each over the budget: alone
    # a pair is two rows: at most 600 // (2 × 300) = 1 pair of 300 tokens per pass
    assert plan_passes([300, 300], max_rows=8, max_tokens=600, rows_per_item=2) == [[0], [1]]
    assert plan_passes(lengths, max_rows=3) == [[1, 4, 6], [3, 0, 2], [5]]  # no budget: shortest first, 3 a pass
    assert plan_passes([7] * 7, max_rows=3) == [[0, 1, 2], [3, 4, 5], [6]]  # equal lengths: input order


def test_passes_without_a_budget_group_rows_of_like_length_and_score_as_one_at_a_time():
    """A pass is padded to its longest row: rows sorted by length pad less, and every row keeps its own score."""
    questions, references, completions = zip(*[(p.question, p.reference, c) for p in pairs(SHORT)
                                               for c in (p.positive, p.negative)])
    rm = build_rm(layers=2, batch_size=3)
    lengths = rm.token_lengths(questions, references, completions)
    passes = rm.passes(len(completions), lambda: lengths, 3)
    assert sorted(i for rows in passes for i in rows) == list(range(len(completions)))
    for shorter, longer in zip(passes, passes[1:]):
        assert max(lengths[i] for i in shorter) <= min(lengths[i] for i in longer)

    def padded(plan: list[list[int]]) -> int:
        return sum(len(rows) * max(lengths[i] for i in rows) for rows in plan)

    assert padded(passes) < padded([list(range(s, min(s + 3, len(lengths)))) for s in range(0, len(lengths), 3)])
    one_at_a_time = [rm.score([q], [r], [c])[0] for q, r, c in zip(questions, references, completions)]
    scores = rm.score(questions, references, completions)
    assert scores == pytest.approx(one_at_a_time, abs=1e-5)
    assert len(set(scores)) == len(scores)  # distinct scores: a row given another's score would show
    assert rm.passes(3, lambda: pytest.fail("one pass needs no lengths"), 3) == [[0, 1, 2]]


def test_a_token_budget_scores_the_same_in_input_order_and_warns_once_for_a_long_sequence(caplog):
    questions, references, completions = zip(*[(p.question, p.reference, c) for p in pairs(SHORT)
                                               for c in (p.positive, p.negative)])
    plain = build_rm(layers=2, batch_size=8).score(questions, references, completions)
    budget = build_rm(layers=2, batch_size=8, max_tokens_per_pass=200)
    lengths = lambda: budget.token_lengths(questions, references, completions)  # noqa: E731
    assert 2 < len(budget.passes(len(completions), lengths, 8)) < len(completions)  # split, several rows a pass
    scores = budget.score(questions, references, completions)
    assert scores == pytest.approx(plain, abs=1e-5)
    assert len(set(scores)) == len(scores)  # distinct scores: a reordering would show
    tiny = build_rm(layers=2, batch_size=8, max_tokens_per_pass=50)  # every sequence is longer: each alone, one warning
    with caplog.at_level(logging.WARNING, logger="coreward.rm.model"):
        assert tiny.score(questions, references, completions) == pytest.approx(plain, abs=1e-5)
        tiny.score(questions, references, completions)
    assert sum("over max_tokens_per_pass" in r.message for r in caplog.records) == 1


def test_param_offload_keeps_the_weights_off_the_device_between_uses():
    """On this CPU-only machine the RM's device and the CPU are the same memory, so no peak can fall here (and a
    "meta" device cannot stand in for a GPU: a parameter's storage cannot be swapped between CPU and meta in place).
    What can be seen: the weights are copied to the device for each use (a copy even when the device is the CPU, so
    this is the GPU's code path), the RM's tensors are their CPU home copies again between uses, an update is
    written back to them, and scores and updates equal those without offload."""
    plain = RMLearner(build_rm(layers=2), lr=LR, batch_size=4)
    offloaded = RMLearner(build_rm(layers=2, param_offload=True), lr=LR, batch_size=4)
    rm = offloaded.rm
    homes = {id(t): home.data_ptr() for t, home in rm._homes}
    assert len(homes) == len(rm._weights())

    def at_home() -> int:
        """How many of the RM's tensors are their CPU home copies (all of them between uses)."""
        return sum(t.data_ptr() == homes[id(t)] for t in rm._weights())

    inside = []
    hook = rm.model.register_forward_pre_hook(lambda *_: inside.append(at_home()))
    triples = [(p.question, p.reference, p.positive) for p in pairs(SHORT)]
    assert rm.score(*zip(*triples)) == pytest.approx(plain.rm.score(*zip(*triples)), abs=1e-6)
    assert at_home() == len(homes)
    plain.update(pairs(SHORT))
    offloaded.update(pairs(SHORT))
    hook.remove()
    assert inside and set(inside) == {0}  # every forward pass ran on device copies, none on the home tensors
    assert at_home() == len(homes)
    assert_same_weights(dict(rm.model.named_parameters()), dict(plain.rm.model.named_parameters()), atol=1e-7)


def test_memory_settings_resume_and_are_refused_where_the_rm_is_sharded(tmp_path):
    from coreward.rm.sharding import Sharding

    learner = RMLearner(build_rm(layers=2), lr=LR, batch_size=4, gradient_checkpointing=True)
    learner.update(pairs(SHORT)[:1])
    learner.save(tmp_path / "ckpt")
    resumed = RMLearner.load(tmp_path / "ckpt", "cpu", lr=LR, batch_size=4, gradient_checkpointing=True,
                             rm_options={"max_tokens_per_pass": 2048, "param_offload": True})
    assert resumed.rm.model.is_activation_checkpointing if hasattr(resumed.rm.model, "is_activation_checkpointing") else resumed.rm.model.is_gradient_checkpointing
    assert (resumed.rm.max_tokens_per_pass, resumed.rm.param_offload) == (2048, True)
    for key, options in (("param_offload", {"param_offload": True}), ("max_tokens_per_pass", {"max_tokens_per_pass": 512})):
        with pytest.raises(CorewardError, match=f"^{key}: not supported for an RM sharded"):
            RMLearner(build_rm(layers=2, **options), lr=LR, sharding=Sharding("fsdp2"))


def test_the_update_norms_are_summed_in_chunks_holding_less_with_the_same_values(tmp_path):
    runs = run_variants(["norms_chunked", "norms_whole"], tmp_path)
    ours, theirs = runs["norms_chunked"], runs["norms_whole"]
    largest = 2048 * 8192 * 8  # the MLP weight's float64 copy, which the whole-tensor sums make (twice, with Δ)
    assert theirs["peak"] > largest, theirs["peak"] / MB
    assert ours["peak"] < theirs["peak"] - largest, (ours["peak"] / MB, theirs["peak"] / MB)
    for name in ("rm/update_norm", "rm/weight_norm"):
        assert ours["metrics"][name] == pytest.approx(theirs["metrics"][name], rel=1e-9), name

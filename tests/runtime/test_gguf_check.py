"""A GGUF conversion keeps its folder only if the folder computes what the file computed on the probe prompt
(runtime/real_models.check_folder): checked here on a tiny saved model against its own logits and against logits
that differ by less than a rounding of the weights would make."""

from __future__ import annotations

import pytest
import torch


def test_a_folder_that_computes_the_probes_logits_passes_and_one_that_does_not_is_refused(tiny_policy):
    from transformers import AutoModelForCausalLM

    from coreward.runtime.errors import CorewardError
    from coreward.runtime.real_models import check_folder, probe_logits

    ids = torch.tensor([[1, 5, 9, 2, 7]])
    expected = probe_logits(AutoModelForCausalLM.from_pretrained(tiny_policy, dtype=torch.float32), ids)
    assert expected.shape[0] == ids.shape[1]
    check_folder(tiny_policy, ids, expected, tiny_policy / "model.gguf", "model")  # the same weights: kept

    moved = expected.clone()
    moved[2, 3] += 1e-3  # one logit of one position
    with pytest.raises(CorewardError, match=r"model: the folder converted from .*model\.gguf does not compute what the "
                                            r"GGUF file does \(largest logit difference 0\.001\); nothing was kept"):
        check_folder(tiny_policy, ids, moved, tiny_policy / "model.gguf", "model")

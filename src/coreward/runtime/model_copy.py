"""The one way coreward copies a model: a fresh instance of its class holding clones of its tensors. An EMA
teacher's copy of the policy and the KL-from-init's frozen initial policy are both made here."""

from __future__ import annotations

import copy

import torch

from coreward.runtime.errors import CorewardError


def own_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of `model` that computes with its own weights: a new instance of its class built from its
    config on the meta device, then given clones of `model`'s parameters and buffers (same device and ties; the
    dtype the class declares for each).

    Not `copy.deepcopy`: that copies instance attributes as they are, and a patched `forward` (TRL's fused LM
    head, accelerate's autocast wrapper, TRL's fp32 lm_head) is a function whose closure holds the *policy's*
    modules; functions are not copied, so the copy would run the policy's forward. A fresh instance has only
    its class's forward, and its hooks are none of the policy's."""
    if not hasattr(type(model), "_from_config"):
        raise CorewardError(f"a model copy needs a transformers model; got {type(model).__name__}")
    with torch.device("meta"):
        fresh = type(model)._from_config(copy.deepcopy(model.config), dtype=model.dtype)
    own = dict(fresh.named_parameters(remove_duplicate=False)) | dict(fresh.named_buffers(remove_duplicate=False))
    theirs = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    if sorted(own) != sorted(theirs):
        raise CorewardError("a fresh model built from the policy's config has other tensors than the policy")
    clones: dict[int, torch.Tensor] = {}  # one clone per policy tensor, so tied weights stay tied
    with torch.no_grad():
        for name, tensor in theirs.items():
            # the dtype the class gives the tensor: TRL's fp32 lm_head is an instance patch whose forward casts
            # its input; the copy has the class's forward, so it keeps the class's dtype too
            clone = clones.setdefault(id(tensor), tensor.detach().to(own[name].dtype, copy=True))
            owner, _, leaf = name.rpartition(".")
            module = fresh.get_submodule(owner)
            if leaf in module._parameters:
                if not isinstance(clone, torch.nn.Parameter):
                    clone = clones[id(tensor)] = torch.nn.Parameter(clone, requires_grad=False)
                module._parameters[leaf] = clone
            else:
                module._buffers[leaf] = clone
    fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh.eval().requires_grad_(False)

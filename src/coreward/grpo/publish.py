"""A finished run as Hugging Face repositories: the model card of `final/`, the learnt reward-side models as
their own folders, and `coreward push`.

    final/                                   the policy (README.md: the model card)
    final/reward_sources/<source>/<name>/    a model the source learnt  -> <repo>-<name>  (its `RewardSource.exports`
                                             says what it is and how to load it)

Nothing here needs a network except `push`, which checks the hub answers before it uploads anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coreward.evaluation.card import (  # noqa: F401  (the card is the evaluation layer's; publish uploads it)
    CARD,
    SOURCES_DIR,
    add_evaluation_to_card,
    exported_description,
    exported_models,
    model_card,
    run_of_final,
    write_model_card,
)
from coreward.runtime.errors import CorewardError


def export_source_models(sources, final: Path, tokenizer: Any = None) -> dict[str, Path]:
    """Each source's learnt models as loadable folders (after `save_sources` wrote their state into `final`).
    A causal-LM folder without a tokenizer gets the policy's, so it generates as it is."""
    exported = {}
    for source in sources:
        for name, folder in source.export_models(final / SOURCES_DIR / source.name).items():
            if tokenizer is not None and not (folder / "tokenizer_config.json").is_file() and (folder / "config.json").is_file():
                tokenizer.save_pretrained(str(folder))
            exported[name] = folder
    return exported


@dataclass(frozen=True)
class Upload:
    repo_id: str
    folder: Path
    ignore: tuple[str, ...] = ()


def push_plan(run_dir: Path, repo: str, dtype: str | None = None) -> list[Upload]:
    """The uploads `push` makes: the policy (without the reward sources' state) and each exported model. With
    `dtype` (bfloat16, float16), the policy goes as a copy in that dtype, `final-<dtype>/` beside `final/`
    (written by `export_policy`): training keeps float32 weights, a smaller export is the user's explicit choice."""
    final = Path(run_dir) / "final"
    if not (final / "config.json").is_file():
        raise CorewardError(f"{run_dir}: no final model (final/config.json): the run has not finished")
    policy = final if dtype is None else Path(run_dir) / f"final-{dtype}"
    plan = [Upload(repo, policy, (f"{SOURCES_DIR}/*", f"{SOURCES_DIR}/**"))]
    plan += [Upload(f"{repo}-{name}", folder) for name, folder in exported_models(final).items()]
    return plan


def export_policy(run_dir: Path, dtype: str) -> Path:
    """`final/`'s policy cast to `dtype` (bfloat16 or float16), with its tokenizer and card, as `final-<dtype>/`
    (written atomically; its weights are the rounding of the trained float32 ones)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coreward.runtime.files import atomic_directory

    if dtype not in ("bfloat16", "float16"):
        raise CorewardError(f"--dtype {dtype!r}: use bfloat16 or float16 (final/ itself is the float32 model)")
    final, target = Path(run_dir) / "final", Path(run_dir) / f"final-{dtype}"
    model = AutoModelForCausalLM.from_pretrained(final, dtype=getattr(torch, dtype))
    with atomic_directory(target) as staging:
        model.save_pretrained(staging)
        AutoTokenizer.from_pretrained(final).save_pretrained(staging)
        if (final / CARD).is_file():
            shutil.copy(final / CARD, Path(staging) / CARD)
    return target


def push(run_dir: Path, repo: str, private: bool = False, token: str | None = None, dtype: str | None = None) -> list[str]:
    """Publish a run: refresh the card, then upload every folder of `push_plan` (with `dtype`, the policy cast to
    it: `export_policy`). Offline: one line, nothing sent."""
    from huggingface_hub import HfApi

    from coreward.data.readers import hub_unreachable, offline_mode

    plan = push_plan(run_dir, repo, dtype)
    write_model_card(run_dir)
    why = "offline mode is set (HF_HUB_OFFLINE)" if offline_mode() else hub_unreachable()
    if why is not None:
        raise CorewardError(f"cannot push {run_dir} to {repo}: {why}")
    if dtype is not None:
        export_policy(run_dir, dtype)
    api = HfApi(token=token)
    urls = []
    for upload in plan:
        try:
            api.create_repo(upload.repo_id, private=private, exist_ok=True)
            described = exported_description(upload.folder)
            if described is not None and not (upload.folder / CARD).is_file():
                title, how = described
                (upload.folder / CARD).write_text(f"# {title}\n\nLearnt with the policy [{repo}](https://huggingface.co/{repo}).\n\n"
                                                  f"```python\n{how.replace('PATH', repr(upload.repo_id))}\n```\n")
            info = api.upload_folder(repo_id=upload.repo_id, folder_path=str(upload.folder),
                                     ignore_patterns=list(upload.ignore) or None)
        except Exception as err:  # noqa: BLE001 - auth, permissions, network: the user's to fix
            raise CorewardError(f"cannot push {upload.folder} to {upload.repo_id}: {type(err).__name__}: "
                                f"{(str(err).splitlines() or [''])[0]}") from None
        urls.append(str(getattr(info, "commit_url", upload.repo_id)))
    return urls

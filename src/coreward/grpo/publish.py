"""A finished run as Hugging Face repositories: the model card of `final/`, the learnt reward-side models as
their own folders, and `coreward push`.

    final/                                   the policy (README.md: the model card)
    final/reward_sources/cooper/rm/          Cooper's reward model     -> <repo>-rm       (VerifyRM.from_pretrained)
    final/reward_sources/co_rewarding_2/teacher/  the EMA teacher      -> <repo>-teacher  (AutoModelForCausalLM)

Nothing here needs a network except `push`, which checks the hub answers before it uploads anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from coreward.runtime.errors import CorewardError


SOURCES_DIR = "reward_sources"  # as in grpo/trainer.py, where the final model's source state is written
CARD = "README.md"
# what each exported model is, for its own card: name -> (title, how to load it)
_EXPORTED = {
    "rm": ("Cooper reward model (VerifyRM)", "coreward.rm.VerifyRM.from_pretrained(PATH)  # or AutoModelForSequenceClassification"),
    "teacher": ("Co-rewarding-II EMA teacher", "AutoModelForCausalLM.from_pretrained(PATH)  # LoRA runs: PeftModel.from_pretrained(base, PATH)"),
}


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


def exported_models(final: Path) -> dict[str, Path]:
    """The exported folders present under `final` (for push and the card)."""
    found = {}
    for name in _EXPORTED:
        for folder in sorted((final / SOURCES_DIR).glob(f"*/{name}")):
            if any(folder.glob("*.json")):
                found[name] = folder
    return found


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _eval_tables(run_dir: Path) -> list[str]:
    """Tables of `coreward eval` results saved inside the run directory (e.g. `coreward eval --output RUN/eval`)."""
    from coreward.evaluation.tables import render_table

    tables = []
    for path in sorted(run_dir.glob("*/results.json")) + sorted(run_dir.glob("*/*/results.json")):
        if "checkpoint-" in str(path.relative_to(run_dir)):
            continue
        results = json.loads(path.read_text())
        n = results["settings"]["n"]
        accuracies = [f"avg@{n}", f"pass@{n}", f"maj@{n}"] if n > 1 else [f"avg@{n}"]
        label_free = [f"agree@{n}", "answered"]  # benchmarks without reference answers
        label = str(path.parent.relative_to(run_dir))
        rows = [(label, m, {b: r[m] for b, r in results["benchmarks"].items()
                            if m in r and r.get("labelled", True) == (m in accuracies)})
                for m in accuracies + label_free]
        rows = [row for row in rows if row[2]]
        settings = ", ".join(f"{k} {v}" for k, v in results["settings"].items() if k in ("n", "temperature", "top_p", "split"))
        tables.append(f"{render_table(rows)}\n\n({settings}; `{path.relative_to(run_dir)}`)")
    return tables


def model_card(run_dir: Path) -> str:
    """The card of `run_dir/final`: base model, method, reward sources and parameters, data, steps, final
    metrics, and evaluation tables when the run directory holds any."""
    from coreward.runtime.metrics import read_metrics

    run_dir = Path(run_dir)
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    except OSError as err:
        raise CorewardError(f"{run_dir} is not a coreward run directory (no config.yaml: {err.strerror})") from None
    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").is_file() else []
    last = rows[-1] if rows else {}
    base = config["model"]["name_or_path"]
    rewards = config["rewards"]
    method = " + ".join(r["name"] for r in rewards)
    data = config["data"]
    front = {"library_name": "transformers", "tags": ["coreward", "grpo", "trl", *(r["name"] for r in rewards)]}
    if "/" in base and not Path(base).exists():
        front["base_model"] = base
    if "/" in data["train"] and not Path(data["train"].rpartition(":")[0] or data["train"]).exists():
        front["datasets"] = [data["train"].split(":")[0]]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             f"# {run_dir.name}: GRPO with {method}", "",
             f"Trained with coreward (on TRL's GRPOTrainer) from `{base}`.", "",
             "## Reward", "", "| source | weight | parameters |", "|---|---:|---|"]
    for r in rewards:
        params = ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items()) or "defaults"
        lines.append(f"| `{r['name']}` | {r.get('weight', 1.0)} | {params} |")
    columns = data.get("columns") or {}
    lines += ["", "## Data", "", f"- train: `{data['train']}` (split `{data['split']}`"
              + (f", first {data['limit']}" if data.get("limit") else "") + ")"]
    if columns:
        lines.append(f"- columns: {', '.join(f'{k} ← `{v}`' for k, v in columns.items())}")
    lines.append(f"- prompt format: {data['prompt_format']}")
    grpo = config.get("grpo") or {}
    lines += ["", "## Training", "", f"- steps: {last.get('step', 0)}", f"- seed: {config.get('seed')}"]
    lines += [f"- {k}: {v}" for k, v in grpo.items()]
    shown = {k: v for k, v in last.items() if k == "reward" or k.startswith(("rewards/", "verified_accuracy", "eval/"))
             and isinstance(v, (int, float))}
    if shown:
        lines += ["", f"## Final metrics (step {last.get('step')})", "", "| metric | value |", "|---|---:|"]
        lines += [f"| {k} | {_format(v)} |" for k, v in sorted(shown.items())]
    tables = _eval_tables(run_dir)
    if tables:
        lines += ["", "## Evaluation", ""] + [t + "\n" for t in tables]
    exported = exported_models(run_dir / "final")
    if exported:
        lines += ["", "## Learnt alongside the policy", ""]
        lines += [f"- {_EXPORTED[n][0]}: `{p.relative_to(run_dir / 'final')}` — `{_EXPORTED[n][1]}`" for n, p in exported.items()]
    return "\n".join(lines).rstrip() + "\n"


def write_model_card(run_dir: Path) -> Path:
    path = Path(run_dir) / "final" / CARD
    path.write_text(model_card(Path(run_dir)))
    return path


def run_of_final(model: str | Path) -> Path | None:
    """The run directory whose finished `final/` `model` names (its completeness marker and the run's config.yaml
    are there); None for anything else (a hub id, `demo`, a checkpoint, a folder of one's own)."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER

    path = Path(model).expanduser().resolve()
    if path.name == "final" and (path / COMPLETE_MARKER).is_file() and (path.parent / "config.yaml").is_file():
        return path.parent
    return None


def add_evaluation_to_card(model: str | Path, output_dir: str | Path) -> Path | None:
    """After an evaluation of a run's `final/` saved inside that run (`coreward eval --model RUN/final --output
    RUN/eval`): the card `final/README.md` written again, its evaluation table now holding the new results. Returns
    the card, or None when `model` is no run's final/ or the results lie outside the run (the card lists only the
    evaluations inside it)."""
    run = run_of_final(model)
    if run is None or not Path(output_dir).expanduser().resolve().is_relative_to(run):
        return None
    return write_model_card(run)


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
            if upload.folder.name in _EXPORTED and not (upload.folder / CARD).is_file():
                title, how = _EXPORTED[upload.folder.name]
                (upload.folder / CARD).write_text(f"# {title}\n\nLearnt with the policy [{repo}](https://huggingface.co/{repo}).\n\n"
                                                  f"```python\n{how.replace('PATH', repr(upload.repo_id))}\n```\n")
            info = api.upload_folder(repo_id=upload.repo_id, folder_path=str(upload.folder),
                                     ignore_patterns=list(upload.ignore) or None)
        except Exception as err:  # noqa: BLE001 - auth, permissions, network: the user's to fix
            raise CorewardError(f"cannot push {upload.folder} to {upload.repo_id}: {type(err).__name__}: "
                                f"{(str(err).splitlines() or [''])[0]}") from None
        urls.append(str(getattr(info, "commit_url", upload.repo_id)))
    return urls

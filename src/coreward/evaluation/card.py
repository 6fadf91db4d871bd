"""A run's model card (final/README.md): what was trained, how, its metrics and evaluations.

Written at the end of training (grpo/train.py), rewritten by `coreward eval` when it evaluates a run's final/ into
the run, and uploaded by `coreward push` (grpo/publish.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from coreward.runtime.errors import CorewardError


SOURCES_DIR = "reward_sources"  # as in grpo/trainer.py, where the final model's source state is written
CARD = "README.md"
def exported_models(final: Path) -> dict[str, Path]:
    """The exported folders present under `final` (for push and the card): those its reward sources declare
    (`RewardSource.exports`), each in `reward_sources/<source>/<name>`."""
    found = {}
    for source in sorted(path for path in (final / SOURCES_DIR).glob("*") if path.is_dir()):
        for name in _declared(source.name):
            folder = source / name
            if any(folder.glob("*.json")):
                found[name] = folder
    return found


def exported_description(folder: Path) -> tuple[str, str] | None:
    """(what it is, how to load it: PATH stands for the folder) of an exported folder, as its source declares it."""
    return _declared(folder.parent.name).get(folder.name)


def _declared(source: str) -> dict[str, tuple[str, str]]:
    from coreward.rewards import registered_sources

    cls = registered_sources().get(source)
    return cls.exports if cls is not None else {}


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _setting(value: Any) -> str:
    """A config value as written: a whole number as an integer (config.yaml keeps TrainingArguments' float-typed
    steps, `save_steps: 2.0`)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() and abs(value) >= 1 else str(value)


def base_model_source(base: str) -> tuple[str, str | None]:
    """What the card says the policy was trained from, and its hub id for the card's `base_model` (None: none)."""
    from coreward.runtime.assets import SHIPPED
    from coreward.runtime.real_models import REAL_MODELS

    if base in REAL_MODELS:
        model = REAL_MODELS[base]
        return (f"`{base}`, coreward's registered name for the hub model `{model.hub_id}` (converted from the GGUF "
                f"file `{model.gguf}` of `{model.install}`)", model.hub_id)
    if base in SHIPPED:
        return f"`{base}`, the {base} policy shipped with coreward", None
    if base.lower().endswith(".gguf"):
        return f"the GGUF file `{base}`", None
    if Path(base).exists():
        return f"the local directory `{base}`", None
    if "/" in base:
        return f"the Hugging Face hub model `{base}`", base
    return f"`{base}`", None


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
        settings = ", ".join(f"{k} {v}" for k, v in results["settings"].items()
                             if k in ("n", "temperature", "top_p", "split") and v is not None)
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
    source, hub_id = base_model_source(base)
    if hub_id:
        front["base_model"] = hub_id
    if "/" in data["train"] and not Path(data["train"].rpartition(":")[0] or data["train"]).exists():
        front["datasets"] = [data["train"].split(":")[0]]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             f"# {run_dir.name}: GRPO with {method}", "",
             f"Trained with coreward (on TRL's GRPOTrainer) from {source}.", "",
             "## Reward", "", "| source | weight | parameters |", "|---|---:|---|"]
    for r in rewards:
        params = ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items()) or "defaults"
        lines.append(f"| `{r['name']}` | {r.get('weight', 1.0)} | {params} |")
    columns = data.get("columns") or {}
    train = str(data["train"])
    read_as = "a file: no split" if Path(train).is_file() else f"split `{data['split']}`"
    lines += ["", "## Data", "", f"- train: `{train}` ({read_as}"
              + (f", first {data['limit']}" if data.get("limit") else "") + ")"]
    if columns:
        lines.append(f"- columns: {', '.join(f'{k} ← `{v}`' for k, v in columns.items())}")
    lines.append(f"- prompt format: {data['prompt_format']}")
    grpo = config.get("grpo") or {}
    lines += ["", "## Training", "", f"- steps: {last.get('step', 0)}", f"- seed: {config.get('seed')}"]
    lines += [f"- {k}: {_setting(v)}" for k, v in grpo.items()]
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
        described = {n: exported_description(p) for n, p in exported.items()}
        lines += [f"- {described[n][0]}: `{p.relative_to(run_dir / 'final')}` — `{described[n][1]}`" for n, p in exported.items()]
    return "\n".join(lines).rstrip() + "\n"


def write_model_card(run_dir: Path) -> Path:
    path = Path(run_dir) / "final" / CARD
    path.write_text(model_card(Path(run_dir)))
    return path


def run_of_final(model: str | Path) -> Path | None:
    """The run directory whose finished `final/` `model` names (its completeness marker and the run's config.yaml
    are there); None for anything else (a hub id, `demo`, a checkpoint, a folder of one's own)."""
    from coreward.runtime.files import COMPLETE_MARKER

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

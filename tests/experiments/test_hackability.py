"""`coreward map`: reward configs × learning rates × seeds, horizons read from the longest run, resumable cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coreward.experiments.hackability import Cell, MapSettings, collect, render_table
from tests.helpers.runs import RULE_CONFIG, coreward_here


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fake_cell(root: Path, reward: str, seed: int, verified: list[float], reward_values: list[float]) -> Cell:
    run_dir = root / reward / f"seed{seed}"
    run_dir.mkdir(parents=True)
    rows = [{"step": i + 1, "reward": r, "verified_accuracy": v, "kl/from_init": 0.01 * (i + 1),
             "verify/prompts_with_verified": 1.0} for i, (v, r) in enumerate(zip(verified, reward_values))]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return Cell(reward, root / f"{reward}.yaml", 1e-4, seed, run_dir, root / "log", status="done")


def test_rows_read_each_horizon_from_the_longest_run_and_compare_with_the_rule_reference(tmp_path):
    """A hacked reward: its verified accuracy climbs to step 2 then falls while its reward keeps rising; the rule
    run climbs throughout. At horizon 2 the hacked run is at its peak; at 4 it has dropped below the rule run."""
    cells = [fake_cell(tmp_path, "rule", s, [0.4, 0.5, 0.6, 0.7], [0.4, 0.5, 0.6, 0.7]) for s in (1, 2)]
    cells += [fake_cell(tmp_path, "model", s, [0.4, 0.6 + 0.02 * s, 0.3, 0.1], [0.5, 0.7, 0.8, 0.9]) for s in (1, 2)]
    settings = MapSettings(configs=[tmp_path / "model.yaml"], lrs=[1e-4], horizons=[4, 2], seeds=[1, 2],
                           output=tmp_path, jobs=1, smooth=0.0)
    result = collect(cells, settings)
    rows = {(r["reward"], r["horizon"]): r for r in result["rows"]}
    assert [(r["reward"], r["horizon"]) for r in result["rows"]] == [("rule", 2), ("model", 2), ("rule", 4), ("model", 4)]
    assert rows["model", 2]["peak_step"] == [2, 2] and rows["model", 4]["peak_step"] == [2, 2]
    assert rows["model", 2]["final_verified"] == pytest.approx([0.62, 0.64])
    assert rows["model", 4]["final_verified"] == pytest.approx([0.1, 0.1])
    assert rows["model", 4]["gap"] == pytest.approx([0.8, 0.8])
    assert rows["model", 4]["vs_reference"] == pytest.approx([-0.6, -0.6])  # per seed, against the rule run
    assert rows["model", 2]["vs_reference"] == pytest.approx([0.12, 0.14])
    assert rows["model", 4]["peak_sqrt_kl"] == pytest.approx([0.02 ** 0.5] * 2)
    table = render_table(result)
    assert "| **rule** (reference) | 0.0001 | 4 |" in table
    assert "| model | 0.0001 | 4 | 63.0 ± 1.4 | 2 ± 0 |" in table  # peaks 62% and 64% over the two seeds
    assert "-60.0 ± 0.0" in table
    # each figure names its smoothing, as report.md's tables do
    assert "| Peak verified, unsmoothed | Peak step | √KL at peak | Final verified, unsmoothed |" in table
    assert "the training rollouts' own, unsmoothed;" in table
    result["settings"]["smooth"] = 0.6
    assert "| Final verified, EMA 0.6 |" in render_table(result) and "EMA-smoothed per step (weight 0.6)" in render_table(result)


def test_map_runs_resumable_cells_side_by_side(tiny_policy, tmp_path):
    """Two cells (the rule twin made from the entropy config, and the entropy config) run two at a time; the
    table, json and figures are written; running the same command again trains nothing."""
    config = tmp_path / "entropy.yaml"
    config.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: entropy\n")
    out = tmp_path / "map"
    command = ["map", "--config", str(config), "--lr", "1e-3", "--horizons", "1,2", "--seeds", "5", "--jobs", "2",
               "--output", str(out), "--set", f"model.name_or_path={tiny_policy}",
               "--set", "grpo.per_device_train_batch_size=16", "--set", "grpo.max_completion_length=12",
               "--set", "data.eval_every=0", "--set", "grpo.save_steps=1"]
    first = coreward_here(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "map: 2 cells (2 rewards × 1 lr × 1 seeds) to 2 steps, 2 at a time" in first.stderr
    assert "map: 2/2 cells done" in first.stderr
    for name in ("map.md", "map.json", "map.png", "curves.png"):
        assert (out / name).is_file()
    result = json.loads((out / "map.json").read_text())
    assert [(r["reward"], r["horizon"]) for r in result["rows"]] == [("rule", 1), ("entropy", 1), ("rule", 2), ("entropy", 2)]
    entropy = next(c for c in result["cells"] if c["reward"] == "entropy")
    assert entropy["horizons"]["2"]["steps"] == 2 and entropy["horizons"]["1"]["steps"] == 1
    assert entropy["horizons"]["2"]["final_reward"] < 0  # minus the mean token entropy: the config's own reward
    rule_config = out / "configs" / "rule.yaml"
    assert "name: rule" in rule_config.read_text()
    metrics = sorted((out / "runs").glob("*/*/metrics.jsonl"))
    assert len(metrics) == 2
    before = [m.stat().st_mtime_ns for m in metrics]

    again = coreward_here(*command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "started" not in again.stderr and "map: 2/2 cells done" in again.stderr
    assert [m.stat().st_mtime_ns for m in metrics] == before


def test_the_costliest_cells_start_first_and_a_resumed_cell_counts_what_it_has_left(tmp_path):
    """Side-by-side cells start by cost: the steps left times the costliest reward's step cost, which each source
    declares (`RewardSource.step_cost`: Cooper's measured on the demo, a user's own source its own); a reward function
    counts as the rule reward."""
    from coreward.experiments.hackability import cell_cost
    from coreward.rewards.cooper import CooperReward

    configs = RULE_CONFIG.parent
    own = tmp_path / "mine.yaml"
    own.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: tests.helpers.user_rewards:short_answers\n")
    slow = tmp_path / "slow.yaml"
    slow.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: rule\n  - name: tests.helpers.user_rewards:SlowReward\n")

    def cell(config: Path, name: str) -> Cell:
        return Cell(name, config, 1e-4, 0, tmp_path / name, tmp_path / f"{name}.log")

    costs: dict[Path, float] = {}
    rule, cooper, mine = cell(RULE_CONFIG, "rule"), cell(configs / "cooper.yaml", "cooper"), cell(own, "mine")
    step = CooperReward.step_cost
    assert step > 1 and cell_cost(cooper, 20, costs) == pytest.approx(step * 20)
    assert cell_cost(rule, 20, costs) == cell_cost(mine, 20, costs) == 20
    assert cell_cost(cell(slow, "slow"), 20, costs) == pytest.approx(3.0 * 20)  # the user's source's own cost
    cooper.run_dir.mkdir()
    (cooper.run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 16)))
    assert cell_cost(cooper, 20, costs) == pytest.approx(step * 5)  # 15 of 20 steps made before a stop


def test_map_refuses_a_missing_config(tmp_path):
    result = coreward_here("map", "--config", str(tmp_path / "nope.yaml"), "--lr", "1e-4", "--horizons", "5",
                           "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "config file not found" in result.stderr and "nope.yaml" in result.stderr


def test_map_png_shows_verified_accuracy_in_percent_as_map_md_does(tmp_path):
    """The figure's top row plots, per reward and horizon, the same mean final verified accuracy that map.md prints
    (in %, not as a fraction)."""
    from coreward.experiments.hackability import map_figure

    cells = [fake_cell(tmp_path, "rule", s, [0.4, 0.5, 0.6, 0.7], [0.4, 0.5, 0.6, 0.7]) for s in (1, 2)]
    cells += [fake_cell(tmp_path, "model", s, [0.4, 0.6 + 0.02 * s, 0.3, 0.1], [0.5, 0.7, 0.8, 0.9]) for s in (1, 2)]
    settings = MapSettings(configs=[tmp_path / "model.yaml"], lrs=[1e-4], horizons=[4, 2], seeds=[1, 2],
                           output=tmp_path, jobs=1, smooth=0.0)
    result = collect(cells, settings)
    lines = render_table(result).splitlines()
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    printed = {}  # (reward, horizon) -> the mean final verified accuracy map.md prints
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells_of_row = [c.strip() for c in line.strip("|").split("|")]
        reward = cells_of_row[0].replace("**", "").replace(" (reference)", "")
        printed[reward, int(cells_of_row[2])] = float(cells_of_row[header.index("Final verified, unsmoothed")].split(" ± ")[0])
    top = map_figure(result).axes[0]
    assert "(%)" in top.get_title()
    plotted = {}
    for container in top.containers:  # one error-bar line per reward
        reward = container.get_label().replace(" (reference)", "")
        for horizon, value in zip(*container.lines[0].get_data()):
            plotted[reward, int(horizon)] = value
    assert plotted.keys() == printed.keys() == {("rule", 2), ("rule", 4), ("model", 2), ("model", 4)}
    for key, value in printed.items():
        assert plotted[key] == pytest.approx(value, abs=0.05), key  # map.md rounds to 0.1
    assert plotted["model", 4] == pytest.approx(10.0) and plotted["rule", 4] == pytest.approx(70.0)

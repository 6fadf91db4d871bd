"""coreward's maintained benchmarks, grouped by what they measure (speed, memory, gpu, verification).

A package so that the harnesses share `benchmarks._common` without editing `sys.path`: run each from the
repository root as a module, `python -m benchmarks.speed.grpo_step_time`, or all of a group with
`python benchmarks/run.py --group speed`. One-off studies live in studies/, outside the package.
"""

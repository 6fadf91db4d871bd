"""Data: records, the benchmark registry, file readers, every source by name (sources.py), prompts, verl-format
parquet, rephrasing, the training rows.

Import from the modules (`coreward.data.benchmarks`, `coreward.data.records`, ...). Nothing is imported here,
so that `coreward --help` stays fast: pyarrow, datasets and transformers load inside the functions that need them.
"""

"""Data: records, the benchmark registry and readers, prompts, verl-format parquet, rephrasing.

Import from the modules (`coreward.data.benchmarks`, `coreward.data.records`, ...). Nothing is imported here,
so that `coreward --help` stays fast: pyarrow, datasets and transformers load inside the functions that need them.
"""

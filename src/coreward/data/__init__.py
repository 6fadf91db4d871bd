"""Data: the benchmark registry, verl-format parquet io and prompt templates.

Only the standard library is imported here (pyarrow, datasets and transformers load inside the
functions that need them), so importing the command line stays fast.
"""

from coreward.data.prompts import INSTRUCTION, build_messages, plain_prompt, render_prompt
from coreward.data.benchmarks import benchmark_splits, count_rows, list_benchmarks, load_benchmark, load_records_file, resolve_data_dir
from coreward.data.readers import write_records_jsonl
from coreward.data.records import Record
from coreward.data.verl import read_verl, write_verl

__all__ = [
    "INSTRUCTION",
    "Record",
    "benchmark_splits",
    "build_messages",
    "count_rows",
    "list_benchmarks",
    "load_benchmark",
    "load_records_file",
    "plain_prompt",
    "read_verl",
    "render_prompt",
    "resolve_data_dir",
    "write_records_jsonl",
    "write_verl",
]

"""The pieces of `python -m benchmarks.accelerator_check` (issue 38): one module per concern.

sizes.py           the model sizes it measures, as run configs, and their synthetic batches
flax_wmt.py        the Flax `examples/wmt` model, read from a copy given by --flax_wmt_dir
compile_worker.py  init and train-step compile seconds, ours beside Flax WMT, one process
speed_worker.py    train-step speed timed in turns: ours, Flax WMT, torch eager/compile
data_worker.py     a run config's data (dataset, tokenizers), built before the README run
runs.py            the README run and deep_sampled launched end to end, their logs read
pytest_lines.py    the tests job's pytest -v lines: counts and failed tests, also cut off
jobs.py            a subprocess with a time limit, its lines timestamped, its partial JSON
report.py          the JSON report's stages from the jobs' results; the machine
table.py           the one table printed from the JSON report
"""

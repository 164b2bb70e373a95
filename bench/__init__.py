"""`make bench`: the pipeline against the sandbox at a tenth of real time, beside two baselines.

config.py     the bench's timings, sandbox settings, fault mix and runs
metrics.py    p(s), the makespan lower bound, utilisation, polls, token ages, overhead
runner.py     drives the real CLI (`python -m ops backfill`) against a sandbox and samples it
baselines.py  (a) one region at a time, (b) the seed design's day steps, on the core client
table.py      the printed table and bench/results.md
"""

"""The benchmark: Specway against the same fake upstream called directly (and against LiteLLM when installed).

`python -m bench` (or `make bench`) runs every cell and prints one table of ratios; see bench/README.md.
"""

"""Benchmarks: runnable scripts that print a table of medians and ratios against a bare-SQL baseline."""

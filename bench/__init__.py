"""Benchmarks against the docs/design.md §10 targets; each prints a table and writes `bench/results/*.json`."""

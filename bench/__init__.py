"""Benchmarks against the DESIGN §10 targets; each prints a table and writes `bench/results/*.json`."""

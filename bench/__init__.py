"""Benchmarks against the targets of docs/design.md §10; each prints a table and writes
`bench/results/*.json`."""

"""The durable journal (docs/design.md §8): SQLite store, single writer, queries and records."""

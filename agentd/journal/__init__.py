"""The durable journal (DESIGN §8): SQLite store, single writer, queries and records."""

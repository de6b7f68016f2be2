"""The research history in git: repo access, the note schema, ref names, ideas, the population
and the ledger that writes leases and results. Imports nothing above it (no engine, views, implement)."""

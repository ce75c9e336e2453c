"""Benchmarks and sweeps built on the public API (they write files; the core never does)."""

"""Benchmarks that are programs, not timed tests (see scripts/bench_*.py)."""

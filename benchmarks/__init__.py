"""Benchmarks that are programs, not timed tests: their logic lives here, ``scripts/bench_*.py`` are their command
lines (the scripts import this package; nothing here imports a script)."""

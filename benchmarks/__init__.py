"""Benchmarks: ``python -m benchmarks.run [--quick]`` (see docs/performance.md); ``studies/``:
finished one-off studies."""

"""Micro-benchmarks that ship with the package (``python -m drlmpi.bench.learner``)."""

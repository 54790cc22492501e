"""Hydra launcher plugin that runs every multirun job as its own MPI job (``hydra/launcher=mpi``)."""

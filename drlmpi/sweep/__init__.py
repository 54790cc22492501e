"""Sweeps: the scheduler that packs a multirun's MPI jobs onto cores, and jobs.json, the record
of every job that the launcher writes and the report reads."""

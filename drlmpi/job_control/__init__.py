"""Job control, for every rank whatever it computes: the progress clock that the work ticks
(progress), the watchdog that ends a job whose rank stopped making progress (watchdog), stops
asked for by a signal (stop), ending a job and its exit codes (abort), and what a rank sets up
before MPI starts (process). Below mpi/: the timed communicator ticks the progress clock; no
module here imports drlmpi.mpi (abort calls mpi4py directly)."""

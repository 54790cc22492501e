"""Everything that talks MPI: the timed communicator, the wire formats, what a rank sets up before
MPI starts, the watchdog that ends a job whose rank stopped answering, and ending a job."""

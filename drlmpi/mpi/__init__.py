"""Everything that talks MPI: the timed communicator and the wire formats. Job control (the
progress clock, the watchdog, signal stops, ending a job) is drlmpi.job_control."""

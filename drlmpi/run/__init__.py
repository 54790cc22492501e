"""One experiment: the command line (python -m drlmpi), the checks before any rank starts, and the
run of a topology on an MPI world."""

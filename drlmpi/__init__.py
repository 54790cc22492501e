"""drlmpi: deep reinforcement learning experiments across MPI ranks.

Run ``python -m drlmpi`` (DQN on CartPole, sequential) or, for example,
``mpiexec -n 4 python -m mpi4py -m drlmpi topology=star env=lunarlander``.
"""

__version__ = "0.1.0"

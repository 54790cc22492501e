"""What several topologies share: :mod:`~drlmpi.topologies.core.base` (the :class:`Topology` every
topology subclasses, the round-control messages), :mod:`~drlmpi.topologies.core.context` (the run
plan and the context that builds a rank's roles), :mod:`~drlmpi.topologies.core.pace` (the
planner's vocabulary), :mod:`~drlmpi.topologies.core.registry` (every topology a config can name),
:mod:`~drlmpi.topologies.core.reports` (what a rank reports), :mod:`~drlmpi.topologies.core.rounds`
(the synchronous round of p2p, star and groups' star wiring, and its links) and
:mod:`~drlmpi.topologies.core.data_parallel` (allgather's, parameter_server's and groups' gradient
exchanges, round, learner, backends and batch rule). Nothing here imports a topology.
"""

"""The pieces of the data-parallel topologies (allgather, parameter_server, groups): gradient
exchanges, the round every rank takes part in, the torch.distributed backends, the batch rule."""

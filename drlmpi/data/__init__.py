"""Experience as it travels and is stored: the packed row layout every topology moves, and the
replay buffer an off-policy learner samples on its device."""

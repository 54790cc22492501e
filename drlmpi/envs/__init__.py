"""Environments: gymnasium.make with the wrappers every run uses, the spaces an algorithm needs
(EnvSpec), the banks a simulator steps its environments in, and Atari (ALE) through ale-py's
AtariVectorEnv."""

"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from drlmpi.envs import probe_spec

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"


@pytest.fixture(scope="session")
def cartpole():
    """CartPole-v1's spaces (discrete actions)."""
    return probe_spec("CartPole-v1")


@pytest.fixture(scope="session")
def pendulum():
    """Pendulum-v1's spaces (continuous actions)."""
    return probe_spec("Pendulum-v1")

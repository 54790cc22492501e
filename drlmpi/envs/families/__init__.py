"""Environment families: one module per kind of ``env.id`` (:class:`~drlmpi.envs.families.base.Family`),
each saying how its ids are recognised, made and checked, what to install for them and whether
they render. :func:`family_of` picks an id's family; nothing outside ``drlmpi/envs/`` branches on
the kind of an id."""

from __future__ import annotations

from drlmpi.envs.families import atari, gym, mujoco
from drlmpi.envs.families.base import Family

#: tried in this order; the first that recognises an id is its family. ``gym`` recognises every id, so
#: it comes last: a new family goes before it.
FAMILIES: tuple[Family, ...] = (atari.FAMILY, mujoco.FAMILY, gym.FAMILY)


def family_of(env_id: str) -> Family:
    """The first family of :data:`FAMILIES` that recognises ``env_id``."""
    for family in FAMILIES:
        if family.recognises(str(env_id)):
            return family
    raise LookupError(f"no environment family recognises env.id={env_id}")


__all__ = ["FAMILIES", "Family", "family_of"]

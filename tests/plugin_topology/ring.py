"""A topology from outside drlmpi, for tests/test_plugin_topology.py: one module and one YAML file
(topology/ring.yaml) in a plugin directory on DRLMPI_PLUGIN_PATH, no edit to drlmpi.

Ring runs star's rounds (rank 0 learns, the others simulate) but declares everything a topology
declares on its own: its settings (star's, with its own ``sync_every`` default and an option of
its own, ``laps``; ``_target_`` and ``name`` are its YAML file's), a rank rule (at least 3 ranks),
a pace model for the planner and a report section."""

from dataclasses import dataclass

from drlmpi.config.settings import integer
from drlmpi.topologies.core.pace import star_pace
from drlmpi.topologies.star import Star, StarSettings


@dataclass(frozen=True)
class RingSettings(StarSettings):
    sync_every: int = integer(128, "experience each simulator collects per round")
    laps: int = integer(3, "rounds a lap lasts (shown by the report)")


class Ring(Star):
    name = "ring"
    settings_class = RingSettings
    min_ranks = 3
    report_order = 90

    @classmethod
    def paper_label(cls, world_size):
        return None

    @classmethod
    def pace(cls, ranks, p, settings):
        """Star's: N-1 simulators step while the learner trains."""
        return star_pace(ranks - 1, p, settings.sync_every, p.slowdown_at(ranks))

    @classmethod
    def report_section(cls, runs):
        laps = sorted({cls.settings_of(run.config["topology"]).laps for _pair, _label, run in runs})
        return ["## Ring", "", f"{len(runs)} run(s) of the ring, laps {laps}."]

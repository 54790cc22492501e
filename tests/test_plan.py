"""``python -m drlmpi.plan``: the model's arithmetic on a probe with known costs, and the
command a user runs (probe, table, plan.json, refusals, --compare)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from drlmpi.config.schema import SCHEMA, defaults
from drlmpi.planner.model import RECHECK, Prediction, load_at, predict
from drlmpi.planner.probe import Probe
from drlmpi.topologies.allgather import Allgather
from drlmpi.topologies.asynchronous import Asynchronous
from drlmpi.topologies.central import Central
from drlmpi.topologies.sequential import Sequential
from drlmpi.topologies.star import Star
from tests.mpirun import REPO
from tests.shared_runs import CUE


def probe(**changes) -> Probe:
    """A probe with round numbers: 1 ms a step, 2 ms an update, cheap messages, no slowdown."""
    values = dict(cores=16, device="cpu", num_envs=1, sim_step_s=1e-3, env_step_s=0.8e-3,
                  act_s={1: 1e-4, 256: 1e-3}, update_s={8: 1e-3, 128: 2e-3}, update_jitter_s=0.0,
                  learner_update_s=2e-3, batch_size=128, updates_per_step=1.0, learning_starts=0,
                  ingest_row_s=0.0, slowdown={}, allreduce_s={2: 1e-4, 16: 4e-4}, row_bytes=100,
                  weight_bytes=10_000, latency_s=0.0, bandwidth_bytes_per_s=1e12, comm_source="test")
    values.update(changes)
    return Probe(**values)


def cfg(topology: str, max_env_steps=None, **options):
    """A config of ``topology`` with its schema defaults (a run's composed config has them all),
    64 steps per round and ``options``."""
    known = f"topology/{topology}" in SCHEMA  # (a made-up topology has only its name)
    chunks = {"sync_every": 64} if known and "sync_every" in SCHEMA[f"topology/{topology}"] else {}
    own = defaults(f"topology/{topology}") if known else {"name": topology}
    return OmegaConf.create({"topology": {**own, **chunks, **options},
                             "run": {"max_env_steps": max_env_steps}})


def test_sequential_steps_and_learns_in_turn():
    assert predict(Sequential, 1, probe(), cfg("sequential")).env_steps_per_s == pytest.approx(1 / 3e-3)


def test_central_acting_beside_its_updates_is_paced_by_the_slower_of_host_and_device():
    """16 ranks, 8 games each, 2 ms an update a step: waiting for its updates the learner adds
    them to its serving (1 ms a pass of 60 rows, cheap messages); acting beside them on a CUDA
    learner, the 2 ms of updates alone set the pace - unless the run is deterministic, the
    overlap is off, or the learner is on the CPU (where nothing runs beside the updates)."""
    cuda = probe(device="cuda", num_envs=8, act_s={1: 1e-3, 256: 1e-3}, sim_step_s=1e-4, env_step_s=1e-4)
    serve = 1e-3 / 60  # one forward pass serves 15 simulators x 4 games (two groups a simulator)
    waiting = 1 / (2e-3 + serve)
    assert predict(Central, 16, cuda, cfg("central", overlap="off")).env_steps_per_s == pytest.approx(
        waiting, rel=1e-3)
    beside = predict(Central, 16, cuda, cfg("central"))  # overlap=auto
    assert beside.env_steps_per_s == pytest.approx(500, rel=1e-3) and beside.bound == "learner"
    for same in (replace(cuda, deterministic=True), replace(cuda, device="cpu")):
        assert predict(Central, 16, same, cfg("central", overlap="auto")).env_steps_per_s == pytest.approx(
            waiting, rel=1e-3)
    # the host's side binds when serving costs more than the updates
    slow_host = probe(device="cuda", num_envs=8, act_s={1: 0.3, 256: 0.3}, sim_step_s=1e-4,
                      env_step_s=1e-4)
    host_bound = predict(Central, 16, slow_host, cfg("central"))
    # (the simulators wait out each 0.3 s serve: 120 steps a 0.3 s trip, twice the learner's pace,
    # which the coupling of the two sides lowers by 1.5%: test_a_round_trip_...)
    learner, sims = 60 / 0.3, 120 / (0.3 + 0.4e-3 + 1e-3)
    assert host_bound.env_steps_per_s == pytest.approx(coupled(learner, sims), rel=1e-3)


def coupled(*rates: float) -> float:
    """The rate of two sides that wait for each other (Pace.coupled): the 4-norm of their times."""
    return sum(r ** -4.0 for r in rates) ** -0.25


def test_a_round_trip_outlasting_the_other_groups_steps_paces_centrals_few_simulators():
    """Central on 4 ranks: 3 simulators of 4 games in 2 groups step 2 games (0.2 ms) while the
    other group waits for its actions: a 1 ms forward pass, and, acting beside 4 ms updates on a
    CUDA learner, half an update more. The group's 1 or 3 ms round trip outlasts the other
    group's 0.2 ms, so the simulators step 12 games a 1.2 or 3.2 ms period, not a 0.4 ms one;
    beside the updates they bind, under the learner's 0.2 ms a step (one update per 20 steps).
    The two sides combine as a 4-norm of their times (at equal paces 2**(1/4) the time of one)."""
    p = probe(device="cuda", num_envs=4, act_s={1: 1e-3, 256: 1e-3}, env_step_s=1e-4, sim_step_s=1e-4,
              update_s={8: 4e-3, 128: 4e-3}, learner_update_s=4e-3, updates_per_step=0.05)
    waiting = predict(Central, 4, p, cfg("central", overlap="off"))  # the serve's pass after updates
    assert waiting.env_steps_per_s == pytest.approx(coupled(1 / (0.2e-3 + 1e-3 / 6), 12 / 1.2e-3), rel=1e-3)
    beside = predict(Central, 4, p, cfg("central"))
    assert beside.env_steps_per_s == pytest.approx(coupled(1 / 0.2e-3, 12 / 3.2e-3), rel=1e-3)
    assert beside.bound == "simulators"
    many = predict(Central, 16, p, cfg("central"))  # 15 simulators: 60 games a 3.2 ms period
    assert many.env_steps_per_s == pytest.approx(coupled(1 / 0.2e-3, 60 / 3.2e-3), rel=1e-3)
    assert many.env_steps_per_s > 0.99 / 0.2e-3 > 1.3 * beside.env_steps_per_s
    from drlmpi.topologies.core.pace import Pace

    assert Pace(sim=1.0, learn=1.0, coupled=True).step_s() == pytest.approx(2 ** 0.25)
    assert Pace(sim=1.0, learn=1.0).step_s() == 1.0  # uncoupled: the slower side


def test_groups_with_the_central_wiring_serve_in_every_group():
    """Central inside each group: the simulators only step (the probe's step without acting), and
    each learner serves its own group's rows. A serve that binds one central learner (3 ms a pass
    of 4 rows: a group of 2 games from each of 2 simulators; updates and all-reduces almost free)
    binds each of the groups' learners alike, so 2 groups on 6 ranks step twice what central
    steps on 3; star's wiring, where the simulators act (1 ms a step), is paced by them instead."""
    from drlmpi.topologies.groups import Groups

    p = probe(num_envs=4, act_s={1: 3e-3, 256: 3e-3}, sim_step_s=1e-3, env_step_s=1e-5,
              update_s={8: 1e-9, 128: 1e-9}, learner_update_s=1e-9, allreduce_s={2: 1e-9, 16: 1e-9})
    one = predict(Central, 3, p, cfg("central"))
    # (the simulators step 8 games a 3.02 ms period: a group's 2 games, then its 3 ms round trip)
    assert one.env_steps_per_s == pytest.approx(coupled(4 / 3e-3, 8 / 3.02e-3), rel=1e-3)
    assert one.bound == "learner"
    two = predict(Groups, 6, p, cfg("groups", learners=2, group_wiring="central"))
    assert two.env_steps_per_s == pytest.approx(2 * one.env_steps_per_s, rel=0.01)
    star_wired = predict(Groups, 6, p, cfg("groups", learners=2, group_wiring="star"))
    assert star_wired.env_steps_per_s == pytest.approx(4 / 1e-3, rel=0.05)  # 4 simulators, 1 ms a step


def test_a_single_learner_caps_star_async_and_p2p():
    """Simulators add throughput until the learner's 2 ms per update (1 per step) binds."""
    p = probe()
    assert predict(Star, 2, p, cfg("star")).env_steps_per_s == pytest.approx(1 / 2e-3, rel=1e-3)
    for cls in (Star, Asynchronous):
        cell = predict(cls, 16, p, cfg(cls.name))
        assert cell.env_steps_per_s == pytest.approx(500, rel=1e-3) and cell.bound == "learner"
    half = predict(Star, 16, probe(updates_per_step=0.5), cfg("star"))  # 1 ms of updates a step
    assert half.env_steps_per_s == pytest.approx(1000, rel=1e-3)
    assert half.updates_per_s == pytest.approx(500, rel=1e-3)
    slow = probe(sim_step_s=10e-3)  # 10 ms a step: 3 simulators give 300 steps/s, below the cap
    cell = predict(Star, 4, slow, cfg("star"))
    assert cell.env_steps_per_s == pytest.approx(300, rel=1e-3) and cell.bound == "simulators"


def test_data_parallel_splits_the_batch_and_pays_the_allreduce():
    """allgather, 16 ranks, batch_rule=global: each update costs the 8-row update (1 ms) plus
    the all-reduce (0.4 ms); every rank runs every update of the job's 1 per step; each round
    of 64 steps per rank adds one all-reduce of the step counts."""
    cell = predict(Allgather, 16, probe(), cfg("allgather", batch_rule="global"))
    step = 1e-3 / 16 + 1.0 * (1e-3 + 4e-4) + 4e-4 / (16 * 64)
    assert cell.env_steps_per_s == pytest.approx(1 / step, rel=1e-9)
    per_rank = predict(Allgather, 16, probe(), cfg("allgather", batch_rule="per_rank"))
    assert per_rank.env_steps_per_s > 5 * cell.env_steps_per_s  # 1/16 of the updates per step


def test_device_learners_sharing_one_gpu_take_turns():
    """allgather on 4 ranks and one GPU: the 32-row update (1.2 ms, interpolated) runs 4 times
    in turn; the all-reduce over 4 ranks is 0.143 ms (interpolated between 2 and 16 ranks)."""
    reduce4 = 1e-4 + (4 - 2) / (16 - 2) * 3e-4
    update32 = 1e-3 + (32 - 8) / (128 - 8) * 1e-3
    cuda = predict(Allgather, 4, probe(device="cuda", gpus=1), cfg("allgather"))
    assert cuda.env_steps_per_s == pytest.approx(1 / (1e-3 / 4 + 4 * update32 + reduce4 + reduce4 / 256))
    two = predict(Allgather, 4, probe(device="cuda", gpus=2), cfg("allgather"))
    cpu = predict(Allgather, 4, probe(), cfg("allgather"))
    assert two.env_steps_per_s == pytest.approx(1 / (1e-3 / 4 + 2 * update32 + reduce4 + reduce4 / 256))
    assert cpu.env_steps_per_s == pytest.approx(1 / (1e-3 / 4 + update32 + reduce4 + reduce4 / 256))


def test_the_steps_before_learning_starts_run_at_the_stepping_rate():
    p = probe(learning_starts=1000)
    cell = predict(Sequential, 1, p, cfg("sequential", max_env_steps=2000))
    assert cell.env_steps_per_s == pytest.approx(2000 / (1000 * 1e-3 + 1000 * 3e-3))
    assert cell.updates_per_s == pytest.approx(1000 / 4.0)


def test_a_short_run_pays_the_learners_wait_for_the_first_round():
    """star on 16 ranks, a budget of 1,000 steps, rounds of 64 steps: the run ends at the end of
    the round that reaches its budget - two rounds of 15 x 64 = 960 rows, 1,920 steps (on an
    H200 host 10,000 steps asked ran 11,520 in rounds of 3,840) - and its learner waits 64 x 1 ms
    before its first rows, then runs at its 2 ms per step. Rounds ramped up (or of episodes) end
    nowhere in particular: the budget stands."""
    cell = predict(Star, 16, probe(), cfg("star", max_env_steps=1000))
    assert cell.env_steps_per_s == pytest.approx(1920 / (0.064 + 1920 * 2e-3), rel=1e-3)
    assert Star.pace(16, probe(), Star.settings_of(cfg("star").topology)).steps_run(1921) == 2880
    ramped = predict(Star, 16, probe(), cfg("star", max_env_steps=1000, ramp_from=8))
    assert ramped.env_steps_per_s == pytest.approx(1000 / (0.064 + 1000 * 2e-3), rel=1e-3)


def test_a_run_with_steps_and_seconds_ends_at_whichever_comes_first():
    """2,000 steps take sequential 4 s (1,000 before learning starts at 1 ms, 1,000 at 3 ms):
    with 10 s allowed the steps end it; with 2.5 s the seconds do, and its pace is the one of
    the steps 2.5 s reach (as a run of 2.5 s alone), not the 2,000 steps' mean."""
    p = probe(learning_starts=1000)
    timed = OmegaConf.merge(cfg("sequential", max_env_steps=2000), {"run": {"max_train_seconds": 10.0}})
    assert predict(Sequential, 1, p, timed).env_steps_per_s == pytest.approx(2000 / 4.0)
    boxed = OmegaConf.merge(cfg("sequential", max_env_steps=2000), {"run": {"max_train_seconds": 2.5}})
    alone = OmegaConf.merge(cfg("sequential"), {"run": {"max_train_seconds": 2.5}})
    assert predict(Sequential, 1, p, boxed).env_steps_per_s == pytest.approx(
        predict(Sequential, 1, p, alone).env_steps_per_s) == pytest.approx((1000 + 1.5 / 3e-3) / 2.5)


@pytest.mark.parametrize("budget", ["steps", "seconds"])
def test_simulators_that_set_the_pace_step_through_the_learners_first_wait(budget):
    """star on 16 ranks, simulators the slower side (45 ms a step: 3 ms a job-wide step against
    the learner's 2 ms): the learner's 2.9 s wait for its first round of 64 steps is not lost -
    its rows count when they arrive - so a run of 10,000 steps (or of 30 s) goes at the
    simulators' pace; only a learner-paced run adds the wait (above). Measured on an H200 host
    (PPO Breakout, star 16, rounds of 256 steps): a 12 s wait, then 30,720 rows at once, the job
    at 2,257 env steps/s where the wait added to every step's time predicted 1,623."""
    p = probe(sim_step_s=45e-3)
    steady = predict(Star, 16, p, cfg("star"), budget=None).env_steps_per_s  # the pace alone
    assert 1 / steady == pytest.approx(3e-3, rel=1e-2)
    run = (cfg("star", max_env_steps=10_000) if budget == "steps"
           else OmegaConf.merge(cfg("star"), {"run": {"max_train_seconds": 30}}))
    assert predict(Star, 16, p, run).env_steps_per_s == pytest.approx(steady, rel=1e-6)
    short = OmegaConf.merge(cfg("star"), {"run": {"max_train_seconds": 4}})  # the wait outlasts the lead
    learner_paced = (4 - 64 * 45e-3) / 2e-3 / 4  # after the wait, the learner's 2 ms a step
    assert predict(Star, 16, p, short).env_steps_per_s == pytest.approx(learner_paced, rel=2e-2)


def test_a_full_machine_slows_compute_by_the_measured_factor():
    p = probe(slowdown={8: 1.0, 16: 1.5})
    assert predict(Star, 16, p, cfg("star")).env_steps_per_s == pytest.approx(500 / 1.5, rel=1e-3)
    assert predict(Star, 8, p, cfg("star")).env_steps_per_s == pytest.approx(500, rel=1e-3)


def test_the_calibrated_load_spreads_geometrically_over_the_sizes():
    """Measured at half the model on 16 ranks: x0.5 there and beyond, x0.5**(log 4/log 16) =
    x0.707 on 4 ranks, none on one rank."""
    calibration = {"ranks": 16, "load": 0.5}
    assert load_at(16, calibration) == pytest.approx(0.5)
    assert load_at(32, calibration) == pytest.approx(0.5)
    assert load_at(4, calibration) == pytest.approx(2 ** -0.5)
    assert load_at(1, calibration) == 1.0
    assert load_at(4, {"ranks": 16, "error": "did not finish"}) == 1.0
    cell = predict(Star, 4, probe(), cfg("star"), calibration)
    assert cell.env_steps_per_s == pytest.approx(500 * 2 ** -0.5, rel=1e-3)
    assert cell.load == pytest.approx(2 ** -0.5)


def test_a_load_measured_at_a_smaller_size_too_is_followed_through_it():
    """allgather's CUDA learners on one GPU: x0.14 on 16 ranks, x0.44 on 8 (a knee the
    geometric spread from 16 alone puts at x0.23); between two sizes measured the spread is
    geometric, at and beyond the largest its load, a one-rank calibration stays one rank's."""
    knee = {"ranks": 16, "load": 0.14, "points": [{"ranks": 8, "load": 0.44}]}
    assert load_at(8, knee) == pytest.approx(0.44)
    assert load_at(4, knee) == pytest.approx(0.44 ** (2 / 3))
    assert load_at(12, knee) == pytest.approx(0.44 * (0.14 / 0.44) ** (math.log(1.5) / math.log(2)))
    assert load_at(16, knee) == load_at(32, knee) == pytest.approx(0.14) and load_at(1, knee) == 1.0
    assert load_at(8, {"ranks": 16, "load": 0.14}) == pytest.approx(0.14 ** 0.75)  # no point: as before
    assert load_at(1, {"ranks": 1, "load": 0.8, "points": []}) == pytest.approx(0.8)


def test_a_load_far_from_one_is_measured_again_alone_and_at_half_the_size(tmp_path, monkeypatch, capsys):
    """A fake launch measures star at x0.1 on 16 ranks and allgather at x0.8: only star runs
    again, in a launch of its own: at 16 ranks (where it now measures three times the rate,
    which stands, the first kept beside it) and at 8 (the largest size asked for up to half),
    whose load becomes the calibration's point that a cell on 4 ranks follows."""
    from drlmpi.planner import calibration

    launches = []
    rates = {(1, "star", 16): 50.0, (1, "allgather", 16): 1.0, (2, "star", 16): 150.0, (2, "star", 4): 300.0}

    def fake_launch(jobs, timeout_s, on_job=None):
        launches.append([(job["run_dir"].rsplit("/", 1)[-1]) for job in jobs])
        for job in jobs:
            name, n = job["run_dir"].rsplit("/", 1)[-1].removeprefix("calibrate_").rsplit("_n", 1)
            run_dir = Path(job["run_dir"])  # root/calibrate_*, root/again_star/calibrate_*
            run_dir.mkdir(parents=True)
            rate = rates[(min(len(launches), 2), name, int(n))]
            (run_dir / "summary.json").write_text(json.dumps({
                "env_steps_per_s": rate * (1 if name == "star" else 400), "env_steps": 10_000,
                "per_rank": []}))
            on_job(job["run_dir"], True)  # as the real launch says each job's end
        return [job["run_dir"] for job in jobs]

    monkeypatch.setattr(calibration, "launch", fake_launch)
    monkeypatch.setattr(calibration, "sizes_to_calibrate", lambda cfgs, why: {"star": 16, "allgather": 16})
    monkeypatch.setattr(calibration, "topology_class", lambda c: Star)
    why = {(name, n): None for name in ("star", "allgather") for n in (1, 4, 8, 16)}
    why[("star", 8)] = "not this size"  # the largest size up to half that it accepts: 4
    result = calibration.calibrate({"star": cfg("star"), "allgather": cfg("star")}, [], why, probe(), 1.0,
                                   tmp_path)
    assert launches == [["calibrate_star_n16", "calibrate_allgather_n16"],
                        ["calibrate_star_n16", "calibrate_star_n4"]]
    said = capsys.readouterr().err.splitlines()  # a line as each launch starts and each job ends
    assert said[0] == ("drlmpi.plan: calibration: 2 jobs of 4 s of training, one after another in one "
                       "launch of 16 ranks ...")
    assert said[1].startswith("drlmpi.plan:   star on 16 ranks: 50 env steps/s (")
    assert said[2].startswith("drlmpi.plan:   allgather on 16 ranks: 400 env steps/s (")
    assert said[3].startswith("drlmpi.plan: calibration of star again, alone and at a smaller size "
                              "(its first load stands): 2 jobs of 4 s") and len(said) == 6
    star, allgather = result["star"], result["allgather"]
    assert "points" not in allgather and "first" not in allgather
    assert RECHECK[0] <= allgather["load"] <= RECHECK[1]
    assert star["ranks"] == 16 and star["load"] == pytest.approx(3 * star["first"]["load"])
    assert star["first"]["load"] < RECHECK[0] and [q["ranks"] for q in star["points"]] == [4]
    assert star["seconds"] == pytest.approx(star["first"]["seconds"] + 2 * star["points"][0]["seconds"])
    assert load_at(16, star) == pytest.approx(star["load"])
    assert load_at(4, star) == pytest.approx(star["points"][0]["load"])
    assert load_at(2, star) == pytest.approx(star["points"][0]["load"] ** 0.5)

    def second_fails(jobs, timeout_s, on_job=None):  # the second launch fails: the first jobs' loads stand
        if len(launches) == 1:
            raise RuntimeError("mpiexec ... ended with exit code 1: out of memory")
        return fake_launch(jobs, timeout_s, on_job)

    launches.clear()
    monkeypatch.setattr(calibration, "launch", second_fails)
    again = calibration.calibrate({"star": cfg("star"), "allgather": cfg("star")}, [], why, probe(), 1.0,
                                  tmp_path / "again")
    assert "points" not in again["star"] and "first" not in again["star"]
    assert again["star"]["load"] == pytest.approx(star["first"]["load"])
    assert "calibration of star again, alone and at a smaller size (its first load stands) failed: mpiexec" \
        in capsys.readouterr().err


def test_a_cells_range_comes_from_the_probes_spread():
    """+-10% on the costs: a learner-bound star cell between 500/1.1 and 500/0.9 steps/s."""
    cell = predict(Star, 16, probe(spread={"sim_step_s": 0.02, "update_s": 0.1}), cfg("star"))
    assert cell.low == pytest.approx(500 / 1.1, rel=1e-3) and cell.high == pytest.approx(500 / 0.9, rel=1e-3)
    # a repeat that hit a pause (spread 136%): the cheap end stops at a tenth of the costs
    wild = predict(Star, 16, probe(update_s={8: 1e-3, 128: 2e-3}, spread={"update_s": 1.36}), cfg("star"))
    assert wild.low == pytest.approx(500 / 2.36, rel=1e-3) and wild.high == pytest.approx(500 / 0.1, rel=1e-3)


def test_a_topology_without_a_model_is_listed_not_refused():
    class Unmodelled:
        name = "ring"

    cell = predict(Unmodelled, 4, probe(), cfg("ring"))
    assert cell.env_steps_per_s is None and cell.refused.startswith("not modelled")


def test_the_calibration_compares_a_real_job_with_the_model(tmp_path, monkeypatch):
    """A fake launch 'measures' 250 env steps/s for star on 16 ranks where the model says 500:
    load x0.5, and the in-job costs are read from the job's ranks."""
    from drlmpi.planner import calibration

    def fake_launch(jobs, timeout_s, on_job=None):
        for job in jobs:
            run_dir = tmp_path / "runs" / job["run_dir"].rsplit("/", 1)[-1]
            run_dir.mkdir(parents=True)
            (run_dir / "summary.json").write_text(json.dumps({
                "env_steps_per_s": 250.0, "env_steps": 10_000, "mpi_wait_share": 0.5,
                "per_rank": [{"updates": 100, "learn_s": 0.4, "env_steps": 0},
                             {"updates": 0, "env_steps": 1000, "simulate_s": 1.5}]}))
            job["run_dir"] = str(run_dir)
        return [job["run_dir"] for job in jobs]

    monkeypatch.setattr(calibration, "launch", fake_launch)
    monkeypatch.setattr(calibration, "sizes_to_calibrate", lambda cfgs, why: {"star": 16})
    monkeypatch.setattr(calibration, "topology_class", lambda c: Star)
    why = {("star", 1): None, ("star", 16): None}
    result = calibration.calibrate({"star": cfg("star")}, [], why, probe(), 1.0, tmp_path)
    star = result["star"]
    assert star["ranks"] == 16 and star["modelled"] == pytest.approx(1e4 / (0.064 + 1e4 * 2e-3), rel=1e-6)
    assert star["load"] == pytest.approx(250 / star["modelled"])
    assert star["in_job"] == {"mpi_wait_share": 0.5, "update_s": pytest.approx(4e-3),
                              "sim_step_s": pytest.approx(1.5e-3)}


def test_the_calibration_takes_the_pace_of_the_jobs_second_half_and_its_warm_up(tmp_path, monkeypatch):
    """A 20 s job at 100 env steps/s for 10 s, then 400 (a learner capturing its graphs first;
    its summary's ``second_half`` from the learner's notes of its pace):
    star's model says 500 a second once learning, so the load is x0.8 (400 / 500, not the whole
    job's 250 / 500) and the 7.4 s the job spent beyond the loaded model is its warm-up. A
    prediction for the same 20 s gives the job's own 250 steps/s; a 60 s run, whose first
    seconds weigh less, 350. The warm-up fell in the job's first 1,000 steps: a run of fewer
    (one round of 960 rows) pays that share of it, a longer one all of it."""
    from drlmpi.outputs.pace import second_half
    from drlmpi.planner import calibration

    def fake_launch(jobs, timeout_s, on_job=None):
        for job in jobs:
            run_dir = tmp_path / "runs" / job["run_dir"].rsplit("/", 1)[-1]
            run_dir.mkdir(parents=True)
            points = [(t, 100 * t if t <= 10 else 1000 + 400 * (t - 10)) for t in range(1, 21)]
            (run_dir / "summary.json").write_text(json.dumps({
                "env_steps_per_s": 250.0, "env_steps": 5_000, "train_seconds": 20.0, "per_rank": [],
                "second_half": second_half(points, 0.0, 20.0)}))
            job["run_dir"] = str(run_dir)
        return [job["run_dir"] for job in jobs]

    monkeypatch.setattr(calibration, "launch", fake_launch)
    monkeypatch.setattr(calibration, "sizes_to_calibrate", lambda cfgs, why: {"star": 16})
    monkeypatch.setattr(calibration, "topology_class", lambda c: Star)
    star = calibration.calibrate({"star": cfg("star")}, [], {("star", 16): None}, probe(), 1.0,
                                 tmp_path)["star"]
    assert star["measured"] == pytest.approx(400) and star["modelled"] == pytest.approx(500)
    assert star["load"] == pytest.approx(0.8) and star["job_rate"] == 250.0
    assert star["warmup_s"] == pytest.approx(20 - (0.064 + 5000 * 2e-3) / 0.8)
    for seconds, rate in ((20, 250), (60, 350)):
        timed = OmegaConf.merge(cfg("star"), {"run": {"max_train_seconds": seconds}})
        assert predict(Star, 16, probe(), timed, star).env_steps_per_s == pytest.approx(rate, rel=1e-3)
    assert star["warmup_steps"] == 1000
    for budget, steps, share in ((480, 960, 0.96), (5000, 5760, 1.0)):
        expected = steps / ((0.064 + steps * 2e-3) / 0.8 + share * star["warmup_s"])
        cell = predict(Star, 16, probe(), cfg("star", max_env_steps=budget), star)
        assert cell.env_steps_per_s == pytest.approx(expected, rel=1e-6)
    # half the warm-up and the load's square root on 4 ranks (log 4 / log 16)
    four = predict(Star, 4, probe(), OmegaConf.merge(cfg("star"), {"run": {"max_train_seconds": 60}}), star)
    assert four.load == pytest.approx(0.8 ** 0.5)
    assert calibration.job_seconds(1.0, image=False) == 4.0
    assert calibration.job_seconds(1.0, image=True) == 30.0


def test_one_job_on_one_rank_calibrates_every_one_rank_cell(monkeypatch):
    """Sequential runs only on one rank: it is calibrated there (the others at their largest
    size), and its load is every one-rank cell's - allgather on one rank is the same process
    stepping and learning in turn - and no larger cell's."""
    from drlmpi.planner import calibration
    from drlmpi.planner import cells as cells_module
    from drlmpi.planner.calibration import sizes_to_calibrate
    from drlmpi.planner.cells import plan_cells

    classes = {"sequential": Sequential, "allgather": Allgather, "star": Star}
    for module in (calibration, cells_module):
        monkeypatch.setattr(module, "topology_class", lambda c: classes[c.topology.name])
    cfgs = {"sequential": cfg("sequential"), "allgather": cfg("allgather"), "star": cfg("star")}
    why = {("sequential", 1): None, ("sequential", 4): "exactly 1 rank", ("allgather", 1): None,
           ("allgather", 4): None, ("star", 1): "2 or more", ("star", 4): None}
    assert sizes_to_calibrate(cfgs, why) == {"sequential": 1, "allgather": 4, "star": 4}
    calibrations = {"sequential": {"ranks": 1, "load": 0.8}, "allgather": {"ranks": 4, "load": 0.5}}
    cells = {(c.topology, c.ranks): c for c in plan_cells(cfgs, why, probe(), calibrations)}
    bare = {(c.topology, c.ranks): c for c in plan_cells(cfgs, why, probe(), {})}
    for one in ("sequential", "allgather"):
        assert cells[(one, 1)].load == pytest.approx(0.8)
        assert cells[(one, 1)].env_steps_per_s == pytest.approx(0.8 * bare[(one, 1)].env_steps_per_s)
    assert cells[("allgather", 4)].load == pytest.approx(0.5)
    assert cells[("star", 4)].load == 1.0  # no calibration of its own; one rank's is not its


def test_the_pace_over_a_runs_second_half_comes_from_the_notes_of_its_episodes():
    """Notes at most every 0.25 s; the rate between the last note at or before the middle of the
    launch's training and the last note; none where the notes do not span the second half."""
    from drlmpi.outputs.pace import PaceNotes, second_half

    notes = PaceNotes()
    for t, steps in ((1.0, 10), (1.1, 11), (1.3, 13), (5.0, 100), (9.0, 300), (10.0, 400)):
        notes.note(t, steps)
    assert notes.points == [(1.0, 10), (1.3, 13), (5.0, 100), (9.0, 300), (10.0, 400)]
    assert second_half(notes.points, 0.0, 10.0) == {
        "from_train_seconds": 5.0, "from_env_steps": 100, "train_seconds": 10.0, "env_steps": 400,
        "env_steps_per_s": 60.0}
    # a resumed launch from 6 s: its middle is 8 s, and no note of it falls before
    assert second_half(notes.points, 6.0, 10.0) is None
    assert second_half(notes.points[:3], 0.0, 10.0) is None  # nothing after 1.3 s of 10
    assert second_half([], 0.0, 10.0) is None


def test_the_comparison_reports_the_share_the_median_and_the_recommended_cell():
    from drlmpi.planner.compare import comparison
    from drlmpi.planner.model import recommended

    cells = [Prediction("sequential", 1, 100.0), Prediction("star", 2, 200.0), Prediction("star", 4, 205.0)]
    assert (recommended(cells).topology, recommended(cells).ranks) == ("star", 2)  # within 3%: fewer ranks
    runs = {("sequential", 1, None): [80.0], ("star", 2, 8): [250.0], ("star", 4, None): [100.0, 300.0]}
    lines, result = comparison(cells, runs)
    assert [round(r["error"], 4) for r in result["cells"]] == [0.25, -0.2, 0.025]
    assert result["within"] == 3 and result["median_error"] == pytest.approx(0.025)
    assert result["recommended"]["share_of_best"] == pytest.approx(250 / 250)
    assert "3 of 3 cells within +-25% (100%); median signed error +2%" in lines


def test_a_plan_over_games_predicts_and_compares_each_setting():
    """``--games 1,4``: every topology and size at each env.num_envs, from one probe - star's
    simulators act for 4 games in one forward pass, so its steps cost less per game - refused per
    setting, labelled with their games, compared with the runs of the same games only."""
    from drlmpi.planner.cells import games_cells
    from drlmpi.planner.cli import recommend, table
    from drlmpi.planner.compare import comparison

    p = probe(sim_step_s=1.8e-3, act_s={1: 1e-3, 4: 1.2e-3, 256: 2e-2}, updates_per_step=0.1)
    cells = games_cells([CUE, "algo.hidden=[16]"], ["sequential", "star"], [1, 2], [1, 4], p, {})
    by = {(c.topology, c.ranks, c.games): c for c in cells}
    assert set(by) == {(t, n, g) for t in ("sequential", "star") for n in (1, 2) for g in (1, 4)}
    assert by[("star", 2, 4)].env_steps_per_s > 1.5 * by[("star", 2, 1)].env_steps_per_s
    assert "needs exactly 1 rank" in by[("sequential", 2, 4)].refused
    assert "star, 4 games" in "\n".join(table(cells, [1, 2]))
    assert recommend(cells).startswith("topology=star on 2 ranks with env.num_envs=4 (")
    from drlmpi.planner.model import recommended  # within 3% of the fastest: fewer ranks, then games

    tie = [Prediction("star", 2, 100.0, games=16), Prediction("star", 2, 98.5, games=8),
           Prediction("star", 4, 101.0, games=8)]
    assert (recommended(tie).ranks, recommended(tie).games) == (2, 8)
    runs = {("star", 2, 1): [by[("star", 2, 1)].env_steps_per_s], ("star", 2, 4): [1.0]}
    _, result = comparison(cells, runs)
    assert [(r["label"], round(r["error"], 2)) for r in result["cells"]] == [("star, 1 games", 0.0)] + [
        ("star, 4 games", round(by[("star", 2, 4)].env_steps_per_s - 1, 2))]


TURNS = "stepping and learning in turn"


def test_a_topology_on_one_rank_is_sequential_under_another_name():
    """Never recommended, even where its model predicts it a little faster; the table says so."""
    from drlmpi.planner.cli import recommend, table
    from drlmpi.planner.model import recommended

    cells = [Prediction("sequential", 1, 646.0, bound=TURNS, low=614.0, high=682.0),
             Prediction("allgather", 1, 660.0, bound=TURNS, low=620.0, high=690.0),
             Prediction("allgather", 2, 403.0, bound=TURNS), Prediction("star", 1, refused="needs 2"),
             Prediction("star", 2, 640.0, bound="learner"), Prediction("sequential", 2, refused="needs 1")]
    best = recommended(cells)
    assert (best.topology, best.ranks) == ("sequential", 1)
    assert recommend(cells) == ("topology=sequential on 1 rank (646 env steps/s; "
                                "stepping and learning in turn)")
    assert recommended(cells[1:]).topology == "star"  # without sequential: the best real cell
    lines = table(cells, [1, 2])
    rows = {line.split()[0]: line for line in lines if line.startswith("  ") and line.split()[0] in
            ("sequential", "allgather", "star")}
    assert "= sequential" in rows["allgather"] and "660" not in rows["allgather"]
    assert "646 (614-682) 1.00x t" in rows["sequential"] and "0.99x l" in rows["star"]
    assert rows["star"].split()[1] == "-"  # refused on 1 rank
    assert ("  = sequential: on 1 rank the topology is sequential under another name "
            "(never recommended)") in lines


def test_the_table_stays_narrow_at_many_sizes():
    """Five sizes of eight topologies: the ranges go before any line passes the width."""
    from drlmpi.planner.cli import WIDTH, table

    sizes = [1, 2, 4, 8, 16]
    cells = [Prediction(name, n, 12_345.6 * n, bound="learner", low=11_000.0 * n, high=13_000.0 * n)
             for name in ("allgather", "async", "central", "groups", "p2p", "parameter_server", "star")
             for n in sizes] + [Prediction("sequential", n, 5_000.0 if n == 1 else None, bound=TURNS,
                                           refused=None if n == 1 else "needs 1") for n in sizes]
    lines = table(cells, sizes)
    assert max(map(len, lines)) <= WIDTH
    star = next(line for line in lines if line.startswith("  star "))
    assert "197,530 39.51x l" in star and "(" not in star
    assert table([c for c in cells if c.ranks < 4], sizes[:2])[0].startswith("Predicted env steps/s (range")


def test_the_calibration_lines_show_each_jobs_load_and_warm_up_within_the_width():
    from drlmpi.planner.cli import WIDTH, calibration_lines

    lines = calibration_lines({
        "parameter_server": {"ranks": 16, "measured": 8_002.4, "modelled": 6_522.0, "load": 1.227,
                             "warmup_s": 7.01, "seconds": 45.2},
        "sequential": {"ranks": 1, "measured": 451.0, "modelled": 574.0, "load": 0.786, "seconds": 9.0},
        "star": {"ranks": 16, "error": "the calibration job did not finish"},
        "allgather": {"ranks": 16, "measured": 264.0, "modelled": 670.0, "load": 0.394, "seconds": 22.0,
                      "first": {"ranks": 16, "measured": 94.0, "modelled": 670.0, "load": 0.14},
                      "points": [{"ranks": 8, "measured": 456.0, "modelled": 1044.0, "load": 0.437}]}})
    assert max(map(len, lines)) <= WIDTH
    row = next(line for line in lines if line.strip().startswith("parameter_server"))
    assert row.split()[1:] == ["16", "8,002", "6,522", "x1.23", "7.0", "s"]
    assert [line.split()[:5] for line in lines if line.strip().startswith("allgather")] == [
        ["allgather*", "16", "94", "670", "x0.14"],  # the first job, then the one that stands
        ["allgather", "16", "264", "670", "x0.39"], ["allgather", "8", "456", "1,044", "x0.44"]]
    assert any(line.startswith("  * its first job") for line in lines)
    assert any("star on 16 ranks: not calibrated" in line for line in lines)


def test_the_plan_goes_under_outputs_or_where_out_says(tmp_path):
    from datetime import datetime

    from drlmpi.planner.cli import plan_path

    cfg = OmegaConf.create({"algo": {"name": "dqn"}, "env": {"name": "lunarlander"}})
    now = datetime(2025, 1, 31, 10, 2, 3)
    assert plan_path(None, cfg, now) == Path("outputs/plan/2025-01-31/10-02-03_dqn_lunarlander/plan.json")
    assert plan_path(str(tmp_path), cfg, now) == tmp_path / "plan.json"  # an existing directory
    assert plan_path(f"{tmp_path}/new/", cfg, now) == tmp_path / "new" / "plan.json"
    assert plan_path(f"{tmp_path}/mine.json", cfg, now) == tmp_path / "mine.json"


def _python(tmp_path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``tmp_path`` with the repository on the import path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _plan(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return _python(tmp_path, "-m", "drlmpi.plan", *args)


def test_the_plan_command_probes_predicts_and_compares(tmp_path):
    """One probe of a tiny task (about 7 s: start-up, 0.1 s per quantity, an MPI ping-pong)."""
    proc = _plan(tmp_path, CUE, "algo.hidden=[16]", "--seconds", "0.1", "--ranks", "1,2",
                 "--topologies", "sequential,star,groups", "--no-calibrate")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100
    (written,) = (tmp_path / "outputs" / "plan").glob("*/*_dqn_cartpole/plan.json")  # not the cwd
    assert not (tmp_path / "plan.json").exists()
    assert f"Plan written to {written.relative_to(tmp_path)}" in proc.stdout
    written.rename(tmp_path / "plan.json")
    plan = json.loads((tmp_path / "plan.json").read_text())
    cells = {(c["topology"], c["ranks"]): c for c in plan["cells"]}
    assert set(cells) == {(t, n) for t in ("sequential", "star", "groups") for n in (1, 2)}
    assert "needs exactly 1 rank" in cells[("sequential", 2)]["refused"]
    assert "topology.learners=2" in cells[("groups", 2)]["refused"]
    assert cells[("star", 2)]["env_steps_per_s"] > 0 and cells[("sequential", 1)]["env_steps_per_s"] > 0
    assert plan["probe"]["sim_step_s"] > 0 and plan["probe"]["updates_per_step"] > 0
    assert "ping-pong" in plan["probe"]["comm_source"]
    assert "Recommendation: topology=" in proc.stdout and "drift" in proc.stdout
    assert "Calibration: none" in proc.stdout
    assert "\n  star " in proc.stdout and "= sequential" not in proc.stdout  # no allgather asked for
    runs = tmp_path / "runs"
    for name, ranks, rate in (("sequential", 1, cells[("sequential", 1)]["env_steps_per_s"] * 2),
                              ("star", 2, cells[("star", 2)]["env_steps_per_s"])):
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps(
            {"topology": name, "world_size": ranks, "algo": "dqn", "env_steps_per_s": rate}))
    compared = _plan(tmp_path, "--plan", "plan.json", "--compare", "runs")
    assert compared.returncode == 0, compared.stderr
    assert "| sequential | 1 |" in compared.stdout and "-50%" in compared.stdout
    assert "1 of 2 cells within +-25% (50%); median signed error" in compared.stdout
    other = _plan(tmp_path, "algo.lr=0.5", "--plan", "plan.json", "--compare", "runs")
    assert other.returncode == 2 and other.stderr.count("\n") == 1 and "was made for" in other.stderr


def test_a_saved_plan_is_predicted_again_by_this_versions_model(tmp_path, capsys):
    """``--plan FILE --again --compare DIR``: the plan's cells predicted again from its own probe
    and calibration (star's load of x0.5 on 2 ranks halves its pace), whatever the file says,
    next to the measured runs, for the plan's overrides followed by those given; the cells the
    plan refused stay refused, the others are not refused again here (a CUDA plan, this machine
    without a GPU); the file is left as it was. Without --plan, --again is refused."""
    from drlmpi.planner.cells import configs
    from drlmpi.planner.cli import main
    from drlmpi.planner.compare import compare_saved
    from drlmpi.planner.model import warmup_steps

    assert Probe.from_json(json.loads(json.dumps(probe().to_json()))) == probe()
    overrides = [CUE, "algo.hidden=[16]", "run.max_env_steps=2000", "device=cuda"]
    star_load = {"ranks": 2, "load": 0.5, "warmup_s": 0.0, "env_steps": 4000}
    plan = {"overrides": overrides, "config": None, "games": None, "probe": probe().to_json(),
            "calibration": {"star": star_load},
            "cells": [Prediction("sequential", 1, 1.0).to_json(), Prediction("star", 2, 1.0).to_json(),
                      Prediction("sequential", 2, refused="needs exactly 1 rank").to_json()]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    written = (tmp_path / "plan.json").read_bytes()
    for name, ranks in (("sequential", 1), ("star", 2)):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "summary.json").write_text(json.dumps(
            {"topology": name, "world_size": ranks, "algo": "dqn", "env_steps_per_s": 100.0}))
    longer = "run.max_env_steps=4000"
    assert compare_saved(tmp_path / "plan.json", [tmp_path / "runs"], [longer], again=True) == 0
    out = capsys.readouterr().out
    cfgs, _ = configs([*overrides, longer], ["star"])
    star = predict(Star, 2, probe(), cfgs["star"], star_load)
    assert star.env_steps_per_s != predict(Star, 2, probe(), configs(overrides, ["star"])[0]["star"],
                                           star_load).env_steps_per_s
    assert warmup_steps(star_load) == 2000 and star.load == 0.5
    rate = f"{star.env_steps_per_s:,.0f}"
    assert f"| star | 2 | {rate} ({rate}-{rate}) | 100 |" in out
    assert "| star | 2 | 1 |" not in out and (tmp_path / "plan.json").read_bytes() == written
    assert compare_saved(tmp_path / "plan.json", [tmp_path / "runs"], ["algo.nosuch=3"], again=True) == 2
    assert capsys.readouterr().err == (f"drlmpi.plan: error: --plan {tmp_path / 'plan.json'} --again: "
                                       "algo.nosuch is not an option of any algo, got 3\n")
    assert main(["--again"]) == 2
    assert capsys.readouterr().err == ("drlmpi.plan: error: --again predicts a saved plan's cells again: "
                                       "give the plan with --plan FILE\n")


def test_a_bad_override_is_refused_in_one_line(tmp_path):
    proc = _plan(tmp_path, "algo.lr=-1")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "algo.lr" in proc.stderr


OWN_OPTIONS = [(["--topologies", "star,ring"], "unknown topology ring"),
               (["--topologies", "stra"], "unknown topology stra (did you mean star?"),
               (["--ranks", "0,2"], "world sizes must be >= 1"),
               (["--ranks", "two"], "comma-separated whole numbers"),
               (["--games", "0,8"], "games per simulator must be >= 1"),
               (["--seconds", "0"], "--seconds 0: must be a finite number > 0"),
               (["--out", "/dev/null/plan.json"], "--out is not a writable directory")]


def test_the_planners_own_options_are_refused_in_one_line_before_torch_is_imported(tmp_path):
    """Each bad option of the planner's own, in one fresh process: one line, exit code 2, and
    torch (1.5-2.8 s of the refusal otherwise) never imported - registering the topologies for the
    overrides' check imports it, so that check comes after the planner's own."""
    code = (
        "import contextlib, io, json, sys\n"
        "from drlmpi.planner.cli import main\n"
        "out = []\n"
        f"for args in {[args for args, _ in OWN_OPTIONS]!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        rc = main(args)\n"
        "    out.append([rc, err.getvalue(), 'torch' in sys.modules])\n"
        "print(json.dumps(out))\n")
    proc = _python(tmp_path, "-c", code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for (args, says), (rc, err, torch_imported) in zip(OWN_OPTIONS, json.loads(proc.stdout), strict=True):
        assert rc == 2 and err.count("\n") == 1 and says in err, (args, err)
        assert not torch_imported, args


def test_the_probe_runs_for_a_topology_of_several_ranks(tmp_path):
    """The probe runs in one process whatever the topology: a groups-only plan (4 ranks at
    the least) builds its simulator and learner there."""
    from drlmpi.planner.cells import compose
    from drlmpi.planner.probe import _context, smallest_world

    cfg = compose([CUE, "algo.hidden=[16]", "topology=groups"])
    assert smallest_world(cfg) == 4
    ctx = _context(cfg, tmp_path)
    actor = ctx.make_actor()
    try:
        assert actor.collect(2).shape[0] == 2 * int(cfg.env.num_envs)
    finally:
        actor.close()
    assert ctx.make_learner(log=False).algo.learner


def test_a_preset_that_names_its_ranks_is_planned_at_every_size(tmp_path):
    """``+experiment=ppo_breakout_16`` says ``world_size: 16``: each cell, and each job the
    planner launches, runs at its own size instead of being refused at every other."""
    from drlmpi.planner.cells import accepted, configs
    from drlmpi.planner.jobs import job

    preset = ["+experiment=ppo_breakout_16", "device=cpu"]
    cfgs, refused = configs(preset, ["central", "star"])
    assert refused == {} and all(c.world_size is None for c in cfgs.values())
    assert [accepted(cfgs[name], n) for name in ("central", "star") for n in (2, 4)] == [None] * 4
    overrides = job(preset, "star", 4, tmp_path)["overrides"]
    assert overrides[:4] == [*preset, "topology=star", "world_size=null"]


def test_calibration_jobs_train_for_seconds_whatever_the_step_budget(tmp_path):
    from drlmpi.planner.jobs import calibration_jobs

    jobs = calibration_jobs(["env=lunarlander", "run.max_env_steps=3000", "topology=star", "world_size=4"],
                            [("star", 16), ("allgather", 8)], 4.0, tmp_path)
    assert [(j["ranks"], j["run_dir"]) for j in jobs] == [(16, str(tmp_path / "calibrate_star_n16")),
                                                         (8, str(tmp_path / "calibrate_allgather_n8"))]
    star = jobs[0]["overrides"]
    assert star[:2] == ["env=lunarlander", "run.max_env_steps=3000"] and "world_size=4" not in star
    # later overrides win: the user's budget is replaced, evaluation and checkpoints are off
    assert star.index("run.max_env_steps=null") > 1 and star[-1] == "run.max_train_seconds=4"
    assert "topology=star" in star and "run.eval_every=1000000000" in star


def test_the_probe_measures_under_the_runs_numerics(monkeypatch):
    """The learner the probe times runs with the run's ``run.deterministic`` and
    ``run.matmul_precision``, as the job's would (they move a GPU update's rate)."""
    import drlmpi.planner.probe as probe_module

    class AppliedError(Exception):
        pass

    def applied(run):
        raise AppliedError(run["matmul_precision"])

    monkeypatch.setattr(probe_module, "apply_run_settings", applied)
    run = OmegaConf.create({**defaults("run"), "matmul_precision": "high"})
    with pytest.raises(AppliedError, match="high"):
        probe_module.probe({"star": OmegaConf.create({"run": run})})


def test_each_job_of_a_planner_launch_binds_its_ranks_as_its_own_launch_would(tmp_path):
    """Two tiny jobs in ONE launch of 2 ranks (a real mpiexec; about 8 s, the only test of the
    planner's shared launch end to end): the first says ``bind_ranks=core`` and runs pinned, a core
    a rank, as ``python -m drlmpi`` pins it; the second says ``bind_ranks=none`` and runs on
    every CPU the launch had again, not on the core the first job left it on. Unbound, the
    calibration's 16-rank jobs ran 4x slower than the sweep's pinned cells (allgather, CUDA)."""
    from drlmpi.job_control.process import cpu_list
    from drlmpi.planner.jobs import job, launch

    base = [CUE, "algo=dqn", "algo.hidden=[16]", "run.max_env_steps=300", "algo.learning_starts=100"]
    ended = []
    done = launch([job([*base, "bind_ranks=core"], "allgather", 2, tmp_path / "core"),
                   job([*base, "bind_ranks=none"], "allgather", 2, tmp_path / "none")], timeout_s=90,
                  on_job=lambda run_dir, finished: ended.append((run_dir, finished, (
                      Path(run_dir) / "summary.json").is_file())))
    assert done == [str(tmp_path / "core"), str(tmp_path / "none")]
    assert ended == [(d, True, True) for d in done]  # each job's end said as it came, its summary there
    cpus = sorted(os.sched_getaffinity(0))
    pinned, unbound = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("core", "none"))
    assert [r["cpus"] for r in pinned["per_rank"]] == [str(cpus[0]), str(cpus[1 % len(cpus)])]
    assert [r["cpus"] for r in unbound["per_rank"]] == [cpu_list(cpus)] * 2
    assert pinned["env_steps"] >= 300 and unbound["env_steps"] >= 300  # both ran their steps


def test_a_planner_launch_past_its_time_is_ended_with_its_ranks(tmp_path, monkeypatch):
    """A launch that outlives ``timeout_s`` is killed - the launcher and every process it started
    (its process group) - and fails in one line; so is one under way when the planner exits (a
    SIGTERM: :func:`drlmpi.planner.end_on_sigterm`); a launcher that exits badly fails with its
    last words (shell commands stand in for mpiexec: about 1 s)."""
    import drlmpi.planner.jobs as jobs_module

    started = tmp_path / "child.pid"
    monkeypatch.setattr(jobs_module, "mpi_command", lambda ranks, module, *args: [
        "sh", "-c", f"sleep 30 & echo $! > {started}; wait"])
    with pytest.raises(RuntimeError, match=r"^sh -c .* no result within 1 s$"):
        jobs_module.launch([{"ranks": 1, "overrides": [], "run_dir": str(tmp_path / "a")}], timeout_s=1)
    stat = Path(f"/proc/{int(started.read_text())}/stat")

    def running() -> bool:  # a killed child no one reaped yet is a zombie: state Z
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(), "the launcher's child outlived the timeout"
    started.unlink()  # a SIGTERM while the jobs run (the planner's handler raises SystemExit): ended too
    monkeypatch.setattr(jobs_module, "mpi_command", lambda ranks, module, *args: [
        "sh", "-c", f'sleep 30 & echo $! > {started}; echo \'{{"job": "x", "finished": true}}\'; wait'])

    def stopped(run_dir, finished):
        raise SystemExit(143)

    with pytest.raises(SystemExit):
        jobs_module.launch([{"ranks": 1, "overrides": [], "run_dir": "x"}], timeout_s=30, on_job=stopped)
    stat = Path(f"/proc/{int(started.read_text())}/stat")
    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(), "a launch outlived the planner's exit"
    monkeypatch.setattr(jobs_module, "mpi_command", lambda ranks, module, *args: [
        "sh", "-c", "echo one rank said this >&2; exit 3"])
    with pytest.raises(RuntimeError, match=r"ended with exit code 3: one rank said this$"):
        jobs_module.launch([{"ranks": 1, "overrides": [], "run_dir": str(tmp_path / "b")}], timeout_s=30)


def test_sigterm_ends_the_planner_as_an_exception():
    """The planner's SIGTERM raises SystemExit (so its launches are ended on the way out) instead
    of Python's default exit at once, which left a calibration's ranks running."""
    import signal

    from drlmpi.planner import end_on_sigterm

    before = signal.getsignal(signal.SIGTERM)
    try:
        end_on_sigterm()
        with pytest.raises(SystemExit) as stopped:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs between bytecodes: long before this ends
        assert stopped.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_planner_warns_when_other_work_keeps_cores_busy(tmp_path):
    """Busy cores from two readings of /proc/stat (here a file changed between them): CPU 1 busy
    all the time, CPU 0 idle, CPU 2 not ours; idle and iowait are not busy. One core busy or more
    is a warning, less is none."""
    from drlmpi.planner.host import busy_cores, cpu_ticks, describe_busy

    def stat(t: int) -> str:  # user nice system idle iowait irq softirq steal, per CPU
        return (f"cpu  {9 * t} 0 0 0 0 0 0 0\ncpu0 0 0 0 {100 * t} {t} 0 0 0\n"
                f"cpu1 {90 * t} 0 {10 * t} 0 0 0 0 0\ncpu2 {100 * t} 0 0 0 0 0 0 0\nintr 5 6\n")

    assert cpu_ticks(stat(1), [0, 1]) == (100, 201)
    path = tmp_path / "stat"
    path.write_text(stat(1))
    waited = []
    assert busy_cores([0, 1], stat=path, wait=lambda s: (waited.append(s), path.write_text(stat(3)))) == \
        pytest.approx(2 * 200 / 402)
    assert waited == [0.5]
    assert busy_cores([0, 1], stat=tmp_path / "none") is None
    assert describe_busy(0.99, 16) is None and describe_busy(None, 16) is None
    assert describe_busy(2.34, 16).startswith("Warning: other work kept 2.3 of 16 cores busy as planning")

"""Sequential topology: one rank simulates, then trains, in one loop (the DQN paper's Alg. 1).

It is the reference every other topology is tested against: no communication, no policy lag
beyond one chunk, exactly ``sync_every`` steps (or episodes) of experience between training
phases.
"""

from __future__ import annotations

from drlmpi.topologies.base import RankReport, RunContext, Topology, learner_report, sync_amount


class Sequential(Topology):
    """Simulate ``sync_every`` steps/episodes, train on what they entitle, repeat."""

    name = "sequential"
    min_ranks = 1
    max_ranks = 1

    def run(self, ctx: RunContext) -> RankReport:
        every, unit = sync_amount(self.cfg)
        learner = ctx.make_learner()
        actor = ctx.make_actor(simulator_index=0)
        policy = learner.algo.policy.flat
        actor.algo.policy.flat.load_params(policy.params_numpy())
        while learner.stop_reason() is None:
            actor.set_global_steps(learner.env_steps)
            learner.ingest(actor.collect(every, unit), source_rank=ctx.comm.rank)
            if learner.train():
                actor.algo.policy.flat.load_params(policy.params_numpy())
                actor.algo.on_policy_loaded()
            learner.maybe_evaluate()
            ctx.progress()
        actor_report = learner_report(ctx.comm.rank, learner, role="simulator+learner", actor=actor)
        actor.close()
        return actor_report

"""The two roles every topology wires together: the Actor (a simulator stepping environments with
a policy) and the Learner (storing experience, training, evaluating, deciding when to stop)."""

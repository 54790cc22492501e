"""``python -m drlmpi.plan``: predict each topology's throughput from a short probe
(:mod:`drlmpi.planner.probe`) and a model of what bounds each one (:mod:`drlmpi.planner.model`)."""

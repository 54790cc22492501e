"""``python -m drlmpi.plan``: the planner's command line (:mod:`drlmpi.planner.cli`), under the
name the documentation and the experiments use."""

from __future__ import annotations

import sys

from drlmpi.planner.cli import main

if __name__ == "__main__":
    sys.exit(main())

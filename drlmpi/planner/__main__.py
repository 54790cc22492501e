"""``python -m drlmpi.planner``: the same command as ``python -m drlmpi.plan``."""

from __future__ import annotations

import sys

from drlmpi.planner.cli import main

sys.exit(main())

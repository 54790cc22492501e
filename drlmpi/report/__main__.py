"""``python -m drlmpi.report PATH [PATH ...] [--out DIR] [--baseline sequential] [--check]``.

Exit status 0 when the report was written, 2 (one line on stderr) when no run is found or the
output folder cannot be written (``--out`` a file, say); with
``--check``, every health check is printed as PASS/FAIL and a failed one makes the status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import ArgumentParser, check_output_folder, refuse
from drlmpi.report import NoRunsError, build_report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m drlmpi.report",
        description="Tables (report.md, table.csv, runs.csv) and plots (PNG) from drlmpi run directories.")
    parser.add_argument("paths", nargs="+", type=Path,
                        help="run directories, or folders holding them at any depth (e.g. a multirun sweep)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: <first PATH>/report)")
    parser.add_argument("--baseline", default="sequential",
                        help="topology label that speedups are relative to (default: sequential)")
    parser.add_argument("--check", action="store_true",
                        help="print each health check (finished, memory flat, lag bound, chunks) as "
                             "PASS/FAIL and exit with status 1 if one failed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.out is not None:
            check_output_folder("--out", args.out)
        report = build_report(args.paths, args.out, args.baseline)
    except ConfigError as exc:
        return refuse("drlmpi.report", exc)
    except OSError as exc:  # the default folder (<first PATH>/report) a file, a full disk
        return refuse("drlmpi.report", f"{exc.filename}: {exc.strerror}")
    except NoRunsError as exc:
        print(f"drlmpi.report: {exc}", file=sys.stderr)
        return 2
    print(report.text_summary())
    if args.check:
        print("\n".join(c.line() for c in report.checks))
        return 1 if report.failed_checks else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m drlmpi [overrides]``: see :mod:`drlmpi.run.command_line`."""

from drlmpi.run.command_line import main

if __name__ == "__main__":
    main()

"""``python -m awm``: the root command, :func:`awm.cli.main`."""

import sys

from awm.cli import main

if __name__ == "__main__":
    sys.exit(main())

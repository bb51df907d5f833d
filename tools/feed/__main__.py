"""``python -m tools.feed``: :func:`tools.feed.cli.main`."""

import sys

from tools.feed.cli import main

if __name__ == "__main__":
    sys.exit(main())

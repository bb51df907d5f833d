"""``python -m watermark``: see :mod:`watermark.cli.main`."""

import sys

from watermark.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

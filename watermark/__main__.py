"""``python -m watermark``: see :mod:`watermark.cli`."""

import sys

from watermark.cli import main

if __name__ == "__main__":
    sys.exit(main())

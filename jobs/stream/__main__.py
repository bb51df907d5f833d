"""``python -m jobs.stream``: the streaming job's command line (:func:`jobs.stream.cli.main`)."""

import sys

from jobs.stream.cli import main

if __name__ == "__main__":
    sys.exit(main())

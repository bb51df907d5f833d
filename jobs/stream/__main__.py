"""``python -m jobs.stream`` (or ``spark-submit jobs/stream/__main__.py``): :func:`jobs.stream.cli.main`."""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.stream.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

r"""The job's code as one archive for ``spark-submit --py-files``: ``dist/awm-code.zip``.

Usage::

    python -m tools.package                       # dist/awm-code.zip
    python -m tools.package --out /tmp/code.zip

    spark-submit --master spark://127.0.0.1:7077 --py-files dist/awm-code.zip ... jobs/stream/__main__.py ...

The archive holds every ``.py`` file of ``jobs/``, ``watermark/`` and ``monitoring/``
(:data:`jobs.common.session.SUBMIT_PACKAGES`) at the archive's root, sorted and time-stamped 1980-01-01, so
the same sources give the same bytes. ``spark-submit`` copies it to every executor, and PySpark puts it on
the Python workers' ``sys.path`` (and the driver's); the job then ships nothing itself
(:func:`jobs.common.session.ship_code`). It is a zip and not the project's wheel: PySpark imports a
``--py-files`` entry only if its name ends in .zip, .egg or .jar, and numba caches the compiled functions
of a module inside an archive only when its path says ``.zip``. The project's dependencies (numpy,
pyarrow, river, numba, ...) are not in it: they come from the executors' Python (``spark.pyspark.python``;
docs/deployment.md, "Running on a cluster").

Prints the archive's path, its size and its packages. Exit status 0, or 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from watermark.cli.log import entry_prog, plain_text, run_main
from watermark.cli.main import EXIT_BAD_INPUT, OneLineParser

__all__ = ["DEFAULT_OUT", "build", "main"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "dist" / "awm-code.zip"


def build(out: str | Path = DEFAULT_OUT) -> Path:
    """Write the archive of :data:`jobs.common.session.SUBMIT_PACKAGES` to ``out`` (replaced atomically).

    Returns
    -------
    Path
        ``out``, absolute.

    Raises
    ------
    ValueError
        If ``out`` does not end in ``.zip`` (PySpark would ship it but not import it).

    """
    from jobs.common.session import SUBMIT_PACKAGES, code_archive

    out = Path(out).absolute()
    if out.suffix.lower() != ".zip":
        msg = f"the archive's name must end in .zip (PySpark imports .zip, .egg, .jar), not {out.name!r}"
        raise ValueError(msg)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".awm-code-") as tmp:
        made = code_archive(Path(tmp), SUBMIT_PACKAGES, out.name)
        made.replace(out)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.package`` argument parser."""
    parser = OneLineParser(
        prog=entry_prog("python -m tools.package"), description=plain_text(__doc__.splitlines()[0])
    )
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        metavar="PATH",
        help="the archive to write (default dist/awm-code.zip)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tools.package``; 0 on success, 2 for bad arguments."""
    return run_main(build_parser(), _run, argv, errors={ValueError: EXIT_BAD_INPUT})


def _run(args: argparse.Namespace) -> int:
    import zipfile

    from jobs.common.session import SUBMIT_PACKAGES

    out = build(args.out)
    with zipfile.ZipFile(out) as archive:
        files = len(archive.namelist())
    print(f"{out}: {files} modules of {', '.join(SUBMIT_PACKAGES)}, {out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

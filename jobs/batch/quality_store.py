"""Where data-quality results live: a Great Expectations file Data Context under the tables' storage.

This module owns the layout; everything else asks it for names. Below the results root (by default
``<tables>/_quality``, :func:`results_root`)::

    gx/                                     the GX project: great_expectations.yml, expectations/,
                                            validation_definitions/, checkpoints/ (one per suite)
    gx/uncommitted/validations/SUITE/RUN/TIME/BATCH.json           one validation result
    gx/uncommitted/data_docs/local_site/index.html                 Data Docs: every kept run
    gx/uncommitted/data_docs/local_site/validations/SUITE/RUN/TIME/BATCH.html

``RUN`` is the run's name (the Airflow run id, made safe for a path: :func:`safe_run_name`), ``TIME`` its
start in UTC (``20261124T090003.123456Z``); the four suites of one check share both.

**Local tables** (a path or ``file:``): the context is opened in place. **Object stores and HDFS**
(``s3a://``, ``abfss://``, ``gs://``, ``hdfs://``): GX's file stores work on local paths, so the context
is opened in a local working folder holding a copy of the project and of the results the index lists (the
Data Docs pages are not fetched: empty stand-ins let GX link them from the index), and after the run every
new or changed file is written back through pyarrow's file system (:mod:`watermark.storage`: one PUT each,
no rename), as every other file of the pipeline. GX's own S3, Azure and GCS store backends were not used:
they need a client of their own per store (boto3, the Azure and Google SDKs) beside pyarrow's, none serves
HDFS, and GX's project file stays local anyway. The copy is the run's, so two checks at once on one store
(the DAG allows one run at a time) could each rewrite the index page; the results of both are kept.

**Retention.** Before each run the oldest runs are deleted, results and Data Docs pages, so that the store
holds the last ``keep_runs`` runs (:data:`DEFAULT_KEEP_RUNS`) with the new one. The index page links the
newest :data:`INDEX_RUNS` of them (each Checkpoint's Data Docs build reads and renders every result the index
lists: ``benchmarks/quality_results.py``); every kept run keeps its page, which
:func:`jobs.batch.quality_results.read_history` names.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watermark import storage
from watermark.storage import Location

#: The results root below the tables' location.
QUALITY_DIR = "_quality"
#: The GX project folder below the results root (what ``gx.get_context(project_root_dir=root)`` makes).
GX_DIR = "gx"
#: The validation results store, below the GX project.
VALIDATIONS_DIR = "uncommitted/validations"
#: The Data Docs site, below the GX project.
SITE_NAME = "local_site"
DOCS_DIR = f"uncommitted/data_docs/{SITE_NAME}"
#: Runs kept by default (each holds one result per suite): at one check an hour (after each hourly
#: backfill), eight days, so last Tuesday's runs are still there.
DEFAULT_KEEP_RUNS = 200
#: Runs the Data Docs index page links (the newest; older kept runs keep their pages, listed by the
#: history). GX reads and renders every result the index lists, at each of a check's four Checkpoints.
INDEX_RUNS = 24
SUITES_PER_RUN = 4
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def results_root(tables: str | Location) -> Location:
    """The default results root of the tables at ``tables``: ``<tables>/_quality``."""
    return Location.of(tables) / QUALITY_DIR


def safe_run_name(name: str | None) -> str:
    """A run name usable as one path segment and in a URL (``manual`` when empty).

    >>> safe_run_name("scheduled__2026-11-24T08:00:00+00:00")
    'scheduled__2026-11-24T08-00-00-00-00'
    """
    text = _UNSAFE.sub("-", name or "").strip("-.")
    return text or "manual"


@dataclass(frozen=True)
class StoredRun:
    """One run in the store: its name and start time (``TIME`` of the layout), and its result files."""

    run_name: str
    run_time: str
    results: tuple[Location, ...]


def stored_runs(root: str | Location) -> list[StoredRun]:
    """The runs whose validation results are under ``root``, newest first."""
    base = Location.of(root) / GX_DIR / VALIDATIONS_DIR
    runs: dict[tuple[str, str], list[Location]] = {}
    for entry in storage.walk_files(base):
        parts = entry.location.relative_to(base).split("/")
        if len(parts) != 4 or not parts[3].endswith(".json"):
            continue  # .ge_store_backend_id and anything else that is not a result
        runs.setdefault((parts[2], parts[1]), []).append(entry.location)
    ordered = sorted(runs.items(), key=lambda item: item[0], reverse=True)
    return [StoredRun(name, time, tuple(files)) for (time, name), files in ordered]


def prune(root: str | Location, keep_runs: int) -> list[StoredRun]:
    """Delete all but the newest ``keep_runs`` runs under ``root`` (results and pages); return the deleted."""
    if keep_runs < 0:
        msg = f"keep_runs must be >= 0, got {keep_runs}"
        raise ValueError(msg)
    project = Location.of(root) / GX_DIR
    deleted = stored_runs(root)[keep_runs:]
    for run in deleted:
        for result in run.results:
            page = page_of(root, result)
            storage.remove(result)
            storage.remove(page)
            if project.local:  # object stores have no folders to leave behind
                for folder in (result.parent, page.parent, result.parent.parent, page.parent.parent):
                    if storage.info(folder) is not None and not storage.listdir(folder):
                        storage.remove_tree(folder)
    return deleted


def result_file(root: str | Location, key: tuple[str, ...]) -> Location:
    """The JSON of the validation result GX keys ``(SUITE, RUN, TIME, BATCH)`` under ``root``."""
    return Location.of(root) / GX_DIR / VALIDATIONS_DIR / ("/".join(key) + ".json")


def page_of(root: str | Location, result: Location) -> Location:
    """The Data Docs page of the validation result ``result`` (a JSON file under ``root``)."""
    project = Location.of(root) / GX_DIR
    relative = result.relative_to(project / VALIDATIONS_DIR)
    return project / DOCS_DIR / "validations" / (relative.removesuffix(".json") + ".html")


def index_page(root: str | Location) -> Location:
    """The Data Docs index page under ``root``."""
    return Location.of(root) / GX_DIR / DOCS_DIR / "index.html"


@contextlib.contextmanager
def working_copy(root: str | Location) -> Iterator[Path]:
    """A local folder holding the GX project of ``root``; written back when the block ends without error.

    A local ``root`` is its own working copy. Otherwise the project and the validation results of the
    newest :data:`INDEX_RUNS` runs are copied to a temporary folder, with an empty stand-in for each of
    their Data Docs pages (GX's index builder links the pages the site holds), and, when the block ends,
    each file there that is new or changed is written to ``root`` (the Data Docs' static assets only when
    missing). What a run copies does not grow with the runs kept.
    """
    loc = Location.of(root)
    if loc.local:
        storage.make_dirs(loc)
        yield Path(loc.key)
        return
    project = loc / GX_DIR
    with tempfile.TemporaryDirectory(prefix="awm-quality-") as tmp:
        workdir = Path(tmp)
        fetched: dict[str, bytes] = {}
        remote_docs: set[str] = set()
        indexed = {(run.run_name, run.run_time) for run in stored_runs(loc)[:INDEX_RUNS]}
        pages, results = f"{DOCS_DIR}/validations/", f"{VALIDATIONS_DIR}/"
        for entry in storage.walk_files(project):
            relative = entry.location.relative_to(project)
            run = _run_of(relative, pages) or _run_of(relative, results)
            if relative.startswith(f"{DOCS_DIR}/"):
                remote_docs.add(relative)
            if run is not None and run not in indexed:
                continue  # an older run: the index does not list it, this run needs nothing of it
            if relative.startswith(pages):
                data = b""  # a stand-in: GX lists the site's pages to link them from the index
            elif relative.startswith(f"{DOCS_DIR}/"):
                continue
            else:
                data = storage.read_bytes(entry.location)
            target = workdir / GX_DIR / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            fetched[relative] = data
        yield workdir
        for file in sorted((workdir / GX_DIR).rglob("*")):
            if not file.is_file():
                continue
            relative = file.relative_to(workdir / GX_DIR).as_posix()
            if relative.startswith(f"{DOCS_DIR}/static/") and relative in remote_docs:
                continue
            data = file.read_bytes()
            if fetched.get(relative) != data:
                storage.write_bytes(project / relative, data)


def _run_of(relative: str, prefix: str) -> tuple[str, str] | None:
    """``(RUN, TIME)`` of a result or page named ``prefix + SUITE/RUN/TIME/FILE`` (None: another file)."""
    if not relative.startswith(prefix):
        return None
    parts = relative.removeprefix(prefix).split("/")
    return (parts[1], parts[2]) if len(parts) == 4 else None


def open_context(workdir: Path, suites_per_run: int = SUITES_PER_RUN) -> Any:
    """The GX file Data Context of the working copy ``workdir`` (created on first use).

    Progress bars and GX's usage analytics are off (a worker has no one to show them to and may have no
    Internet access). The Data Docs index lists the newest :data:`INDEX_RUNS` runs of ``suites_per_run``
    results each.
    """
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=str(workdir))
    context.variables.analytics_enabled = False
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    sites = dict(context.variables.data_docs_sites or {})
    site = dict(sites.get(SITE_NAME) or {})
    if site:  # GX's default site: its index lists the newest runs only (each build reads what it lists)
        site["show_how_to_buttons"] = False
        site["site_index_builder"] = {
            "class_name": "DefaultSiteIndexBuilder",
            "validation_results_limit": INDEX_RUNS * suites_per_run,
        }
        sites[SITE_NAME] = site
        context.variables.data_docs_sites = sites
    context.variables.save()
    return context

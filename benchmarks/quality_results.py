"""What keeping data-quality results costs a check, by the number of runs the store already holds.

    python benchmarks/quality_results.py [--kept 0,25,100] [--repeat 2] [--json]

For each count K, a results store (``jobs/batch/quality_store.py``) on the local disk is seeded with K runs
(copies of one real run's four validation results and Data Docs pages, under new run names and times),
then one check of the pipeline's four suites (``jobs.batch.quality.suites``, tiny inline frames) is timed:
the four Checkpoint runs, each storing its result and rebuilding the Data Docs index over every kept run,
plus retention. Printed beside it: a validation of the same frames through an ephemeral context (what the
check did before results were kept), and the time :func:`jobs.batch.quality_results.read_history` takes to
read the last 10 runs back. Figures are wall-clock seconds, the median of ``--repeat`` checks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from jobs.batch.quality import QualityReport, suites, validate  # noqa: E402
from jobs.batch.quality_results import read_history  # noqa: E402
from jobs.batch.quality_store import DOCS_DIR, GX_DIR, VALIDATIONS_DIR, stored_runs  # noqa: E402
from jobs.common.schemas import QUARANTINE_REASONS  # noqa: E402
from watermark.storage import Location  # noqa: E402


def frames() -> dict[str, pd.DataFrame]:
    """A few rows per suite that meet every expectation but one (a count of 0)."""
    return {
        "aggregates": pd.DataFrame(
            {
                "key": ["a", "b"],
                "window_start_ms": [0, 0],
                "window_end_ms": [1000, 1000],
                "count": [3, 0],
                "revision": [0, 1],
                "late_count": [0, 2],
            }
        ),
        "late_events": pd.DataFrame(
            {
                "key": ["a"],
                "event_time_ms": [5],
                "arrival_time_ms": [9],
                "reconciled": [True],
                "late_by_ms": [3],
            }
        ),
        "quarantine": pd.DataFrame({"reason": [QUARANTINE_REASONS[0]]}),
        "conservation": pd.DataFrame(
            {
                "late_events": [1],
                "late_in_log": [1],
                "reconciled_events": [1],
                "late_count_total": [1],
                "on_time_slack": [0],
            }
        ),
    }


def seed(root: Path, kept: int) -> None:
    """Copy the one run under ``root`` into ``kept`` runs in all (new names, times a second apart)."""
    [run] = stored_runs(Location.of(root))
    project = root / GX_DIR
    for i in range(1, kept):
        stamp = f"20200101T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}.000000Z"
        for result in run.results:
            suite, _, _, name = Path(result.key).relative_to(project / VALIDATIONS_DIR).parts
            for base, suffix in ((VALIDATIONS_DIR, ".json"), (f"{DOCS_DIR}/validations", ".html")):
                source = project / base / suite / run.run_name / run.run_time / (Path(name).stem + suffix)
                target = project / base / suite / f"seed{i}" / stamp / source.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)


def ephemeral_s() -> float:
    """One validation of the four suites through an ephemeral context (no store, no Data Docs)."""
    import great_expectations as gx

    data = frames()
    started = time.perf_counter()
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("awm")
    for name, expectations in suites().items():
        batch = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        definition.run(batch_parameters={"dataframe": data[name]})
    return time.perf_counter() - started


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kept", default="0,25,100", help="runs already in the store (comma-separated)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ephemeral_s()  # imports and GX's first-use costs, not counted
    rows = []
    for kept in [int(x) for x in args.kept.split(",")]:
        checks, reads = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp) / "_quality"
                validate(frames(), suites(), QualityReport(tables="t"), root, run_name="first")
                if kept:
                    seed(root, kept)
                started = time.perf_counter()
                validate(
                    frames(), suites(), QualityReport(tables="t"), root, run_name="timed", keep_runs=kept + 1
                )
                checks.append(time.perf_counter() - started)
                started = time.perf_counter()
                read_history(Location.of(root), 10)
                reads.append(time.perf_counter() - started)
        rows.append(
            {
                "kept_runs": kept,
                "check_s": round(statistics.median(checks), 2),
                "ephemeral_s": round(statistics.median(ephemeral_s() for _ in range(args.repeat)), 2),
                "history_10_runs_s": round(statistics.median(reads), 3),
            }
        )
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'runs kept':>9}  {'check (stored, Data Docs)':>25}  {'ephemeral':>9}  {'read last 10 runs':>17}")
    for r in rows:
        print(
            f"{r['kept_runs']:>9}  {r['check_s']:>23.2f} s  {r['ephemeral_s']:>7.2f} s  "
            f"{r['history_10_runs_s']:>15.3f} s"
        )


if __name__ == "__main__":
    main()

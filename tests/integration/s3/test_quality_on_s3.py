"""Data-quality results on an object store (moto's S3 server, fixture s3_server): the GX Data Context is
worked on in a local copy and written back, so the results, the Data Docs pages and the retention live on
``s3a://`` and are read back from there (real Great Expectations, tiny inline frames)."""

from watermark import storage
from watermark.storage import Location


def test_results_data_docs_and_retention_live_on_s3_and_are_read_back_from_there(s3_server, tmp_path):
    from jobs.batch.quality_results import read_history
    from jobs.batch.quality_store import DOCS_DIR, GX_DIR, index_page, stored_runs
    from tests.unit.jobs.batch.test_quality import run_suites

    root = Location.of(f"s3a://{s3_server.new_bucket()}/tables/_quality")
    first = run_suites(root, [1, 2], "monday", keep_runs=2)
    assert first.success and first.docs_index == index_page(root).uri
    project = root / GX_DIR
    names = {e.location.relative_to(project) for e in storage.walk_files(project)}
    assert {"great_expectations.yml", "checkpoints/aggregates.json", "checkpoints/quarantine.json"} <= names
    assert f"{DOCS_DIR}/index.html" in names and any(n.startswith(f"{DOCS_DIR}/static/") for n in names)

    run_suites(root, [1], "tuesday", keep_runs=2)
    failed = run_suites(root, [0], "wednesday", keep_runs=2)  # monday's run is deleted first
    assert [r.run_name for r in stored_runs(root)] == ["wednesday", "tuesday"]
    assert not storage.exists(Location.of(first.docs_pages["aggregates"]))  # its page too

    history = read_history(root, 1)  # straight from the bucket
    assert [(r.run_name, r.suite, r.success) for r in history] == [
        ("wednesday", "aggregates", False),
        ("wednesday", "quarantine", True),
    ]
    [failure] = history[0].failures
    assert (failure.expectation, failure.examples) == ("expect_column_values_to_be_between", [0])
    page = Location.of(failed.docs_pages["aggregates"])
    assert page == history[0].page and page.scheme == "s3a" and "count" in storage.read_text(page)
    index = storage.read_text(index_page(root))
    assert "wednesday" in index and "tuesday" in index and "monday" not in index


def test_runs_the_index_no_longer_lists_keep_their_results_and_pages_on_s3(s3_server, monkeypatch):
    """The local copy holds only the runs the index lists; the older kept runs stay whole on the store."""
    import jobs.batch.quality_store
    from jobs.batch.quality_results import read_history
    from jobs.batch.quality_store import index_page
    from tests.unit.jobs.batch.test_quality import run_suites

    monkeypatch.setattr(jobs.batch.quality_store, "INDEX_RUNS", 1)
    root = Location.of(f"s3a://{s3_server.new_bucket()}/tables/_quality")
    reports = [
        run_suites(root, [0] if day == "monday" else [1], day, keep_runs=3)
        for day in ("monday", "tuesday", "wednesday")
    ]
    index = storage.read_text(index_page(root))
    assert "wednesday" in index and "tuesday" not in index and "monday" not in index
    history = read_history(root, 3)
    assert [(r.run_name, r.suite, r.success) for r in history][-2:] == [
        ("monday", "aggregates", False),
        ("monday", "quarantine", True),
    ]
    assert history[-2].failures[0].examples == [0]
    for report in reports:
        assert "count" in storage.read_text(Location.of(report.docs_pages["aggregates"]))

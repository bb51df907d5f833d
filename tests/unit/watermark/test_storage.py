"""Locations as paths or URIs (watermark.storage): parsing, whole writes, listings, and the light reader
refusing a data file outside its table. The same functions on a real S3 server: tests/integration/s3."""

import json
import os

import pyarrow as pa
import pyarrow.parquet  # noqa: F401 (pa.parquet)
import pytest

from watermark import storage
from watermark.storage import Location, StorageError


@pytest.mark.parametrize(
    ("given", "for_spark"),
    [
        ("s3a://bucket/tables/", "s3a://bucket/tables"),
        ("s3://bucket//a/./b", "s3://bucket/a/b"),
        ("abfss://c@acct.dfs.core.windows.net/x", "abfss://c@acct.dfs.core.windows.net/x"),
        ("gs://b/k", "gs://b/k"),
        ("hdfs://nn:8020/data", "hdfs://nn:8020/data"),
        ("file:///data/in", "/data/in"),
        ("file:/data/in", "/data/in"),
        ("/data/./in/", "/data/in"),
    ],
)
def test_a_location_is_a_path_or_a_uri_and_spark_gets_it_unchanged(given, for_spark):
    assert Location.of(given).spark == for_spark


def test_a_relative_path_is_made_absolute_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Location.of("out/tables").spark == f"{tmp_path}/out/tables"
    assert Location.of("out/tables").uri == f"file://{tmp_path}/out/tables"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        ("s3a:///no-bucket", "no bucket"),
        ("s3a://bucket/a/../b", "'..' is not allowed"),
        ("file://host/x", "names no host"),
        ("", "non-empty"),
    ],
)
def test_a_location_that_cannot_be_used_is_refused_in_one_line(given, says):
    with pytest.raises(StorageError, match=says) as info:
        Location.of(given)
    assert "\n" not in str(info.value)


def test_names_join_below_a_location_and_never_climb_out():
    root = Location.of("s3a://bucket/cp")
    assert (root / "stage" / "state-1").spark == "s3a://bucket/cp/stage/state-1"
    assert (root / "stage/open").relative_to(root) == "stage/open"
    assert (root / "x").parent == root and Location.of("s3a://bucket").parent == Location.of("s3a://bucket")
    for bad in ("..", "a/../b", "", "/abs"):
        with pytest.raises(StorageError):
            root / bad
    with pytest.raises(StorageError, match="is not below"):
        Location.of("s3a://other/cp/x").relative_to(root)


def test_a_write_is_whole_creates_its_folders_and_leaves_nothing_temporary(tmp_path):
    target = tmp_path / "a" / "b" / "file.json"
    storage.write_text(str(target), '{"v": 1}')
    storage.write_text(str(target), '{"v": 2}')
    assert json.loads(storage.read_text(str(target))) == {"v": 2}
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]


def test_a_rewrite_keeps_the_files_mode_and_a_new_file_follows_the_umask(tmp_path):
    target = tmp_path / "watermark.json"
    old = os.umask(0o022)
    try:
        storage.write_text(str(target), "1")
        assert target.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
        os.chmod(target, 0o640)
        storage.write_text(str(target), "2")
        assert target.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_listings_are_by_name_and_a_missing_folder_lists_nothing(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_text("bb")
    (tmp_path / "d" / "sub" / "a.txt").write_text("a")
    entries = storage.listdir(str(tmp_path / "d"))
    assert [(e.name, e.is_dir) for e in entries] == [("b.txt", False), ("sub", True)]
    assert entries[0].size == 2 and entries[0].mtime_ms is not None
    assert storage.listdir(str(tmp_path / "missing")) == []
    assert [
        e.location.relative_to(Location.of(str(tmp_path))) for e in storage.walk_files(str(tmp_path))
    ] == [
        "d/b.txt",
        "d/sub/a.txt",
    ]
    assert storage.is_file(str(tmp_path / "d" / "b.txt")) and not storage.is_file(str(tmp_path / "d"))


def test_deletes_of_what_is_not_there_are_no_errors(tmp_path):
    storage.remove(str(tmp_path / "nothing"))
    storage.remove_tree(str(tmp_path / "nothing"))
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("x")
    storage.remove_tree(str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()


def test_reading_a_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        storage.read_bytes(str(tmp_path / "missing.json"))


def test_s3_settings_come_from_the_standard_aws_environment():
    opts = storage.s3_filesystem_options(
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000/",
            "AWS_ACCESS_KEY_ID": "id",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    assert opts["endpoint_override"] == "127.0.0.1:9000" and opts["scheme"] == "http"
    assert opts["region"] == "us-east-1" and opts["access_key"] == "id" and opts["secret_key"] == "secret"
    assert "endpoint_override" not in storage.s3_filesystem_options({"AWS_REGION": "eu-west-1"})


def test_the_light_reader_refuses_a_data_file_the_log_places_outside_the_table(tmp_path):
    from deltalake import write_deltalake

    from jobs.common.reads import TableReader

    secret = tmp_path / "secret.parquet"
    pa.parquet.write_table(pa.table({"x": [42]}), secret)
    table = tmp_path / "tables" / "t"
    write_deltalake(str(table), pa.table({"x": [1, 2]}))
    assert TableReader(str(tmp_path / "tables"), "reader").read("t").column("x").to_pylist() == [1, 2]
    log = next((table / "_delta_log").glob("*.json"))
    lines = []
    for line in log.read_text().splitlines():
        doc = json.loads(line)
        if "add" in doc:
            doc["add"]["path"] = "..%2F..%2Fsecret.parquet"
        lines.append(json.dumps(doc))
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(StorageError, match="outside the table"):
        TableReader(str(tmp_path / "tables"), "reader").read("t")

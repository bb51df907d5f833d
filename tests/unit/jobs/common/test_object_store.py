"""The AWS environment to Spark's s3a settings and delta-rs's storage options (jobs.common.object_store)."""

from __future__ import annotations

import pytest

from jobs.common.object_store import (
    S3_SCHEME_SETTINGS,
    SIMPLE_PROVIDER,
    TEMPORARY_PROVIDER,
    deltalake_storage_options,
    s3_endpoint,
    s3a_settings,
)

S3A = "spark.hadoop.fs.s3a."
LOCAL = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ACCESS_KEY_ID": "key-id",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_REGION": "us-east-1",
}


def s3a(environ: dict[str, str]) -> dict[str, str]:
    """The settings beyond the s3:// mapping, without the ``spark.hadoop.fs.s3a.`` prefix."""
    settings = s3a_settings(environ)
    assert settings.items() >= S3_SCHEME_SETTINGS.items()  # s3:// is s3a's whatever the environment
    return {k.removeprefix(S3A): v for k, v in settings.items() if k not in S3_SCHEME_SETTINGS}


def test_a_local_http_endpoint_gets_path_style_access_without_tls():
    assert s3a(LOCAL) == {
        "endpoint": "http://127.0.0.1:9000",
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "endpoint.region": "us-east-1",
        "access.key": "key-id",
        "secret.key": "secret",
        "aws.credentials.provider": SIMPLE_PROVIDER,
    }
    assert all(key.startswith("spark.hadoop.fs.") for key in s3a_settings(LOCAL))


def test_an_https_endpoint_keeps_tls_and_aws_itself_needs_no_endpoint():
    https = s3a({"AWS_ENDPOINT_URL": "https://minio.example.org:9000/"})
    assert https == {"endpoint": "https://minio.example.org:9000", "path.style.access": "true"}
    assert s3a({"AWS_REGION": "eu-west-1"}) == {"endpoint.region": "eu-west-1"}
    assert s3a({}) == {}


def test_the_s3_specific_endpoint_and_region_variables_win():
    environ = {
        "AWS_ENDPOINT_URL": "http://general:1",
        "AWS_ENDPOINT_URL_S3": "http://s3-only:2",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert s3_endpoint(environ) == "http://s3-only:2"
    assert s3a(environ)["endpoint.region"] == "eu-west-1"  # AWS_DEFAULT_REGION when AWS_REGION is unset
    assert s3a(environ | {"AWS_REGION": "eu-central-1"})["endpoint.region"] == "eu-central-1"
    ignored = environ | {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "TRUE"}
    assert s3_endpoint(ignored) is None
    assert "endpoint" not in s3a(ignored) and "AWS_ENDPOINT_URL" not in deltalake_storage_options(ignored)


def test_blank_variables_count_as_unset():
    blank = {name: "  " for name in LOCAL} | {"AWS_ENDPOINT_URL_S3": "", "AWS_SESSION_TOKEN": ""}
    assert s3a(blank) == {}
    assert deltalake_storage_options(blank) == {}
    assert s3a(LOCAL | {"AWS_SESSION_TOKEN": " "})["aws.credentials.provider"] == SIMPLE_PROVIDER


def test_a_session_token_selects_the_temporary_credentials_provider():
    temporary = LOCAL | {"AWS_SESSION_TOKEN": "token"}
    got = s3a(temporary)
    assert (got["session.token"], got["aws.credentials.provider"]) == ("token", TEMPORARY_PROVIDER)
    assert deltalake_storage_options(temporary)["AWS_SESSION_TOKEN"] == "token"


@pytest.mark.parametrize("missing", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_half_a_key_pair_is_refused_naming_both_variables(missing):
    environ = {k: v for k, v in LOCAL.items() if k != missing}
    given = ({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} - {missing}).pop()
    message = f"{given} is set but {missing} is not"
    with pytest.raises(ValueError, match=message):
        s3a_settings(environ)
    with pytest.raises(ValueError, match=message):
        deltalake_storage_options(environ)


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9000", "s3://bucket", "http://", "ftp://host"])
def test_an_endpoint_that_is_not_an_http_url_is_refused(endpoint):
    with pytest.raises(ValueError, match=r"^AWS_ENDPOINT_URL=.* is not an http:// or https:// URL"):
        s3a_settings({"AWS_ENDPOINT_URL": endpoint})


def test_deltalake_options_mirror_the_spark_settings():
    assert deltalake_storage_options(LOCAL) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "key-id",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "us-east-1",
    }
    https = deltalake_storage_options({"AWS_ENDPOINT_URL_S3": "https://s3.example.org"})
    assert https == {"AWS_ENDPOINT_URL": "https://s3.example.org"}  # no plain HTTP allowed
    # Nothing for a lock or an unsafe rename: delta-rs 1.6 commits with conditional PUTs.
    assert not any("LOCK" in k or "RENAME" in k for k in deltalake_storage_options(LOCAL))

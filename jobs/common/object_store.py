"""Object storage (S3 and S3-compatible servers) for Spark and delta-rs, configured from the AWS environment.

The standard variables of the AWS SDKs and CLI configure both readers of the tables:

=================================================== =========================================================
variable                                            what it sets
=================================================== =========================================================
``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``  a custom endpoint (``http://127.0.0.1:9000``): Spark's
                                                    ``fs.s3a.endpoint`` with path-style access (and
                                                    ``fs.s3a.connection.ssl.enabled=false`` for ``http:``);
                                                    delta-rs's ``AWS_ENDPOINT_URL`` (and ``AWS_ALLOW_HTTP``).
                                                    ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` ignores both
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``    static keys (``fs.s3a.access.key``, ``fs.s3a.secret.key``
(``AWS_SESSION_TOKEN``)                             with ``SimpleAWSCredentialsProvider``; with a session
                                                    token, ``fs.s3a.session.token`` and
                                                    ``TemporaryAWSCredentialsProvider``). Without keys, s3a's
                                                    default chain (environment, instance role) is left alone
``AWS_REGION``, else ``AWS_DEFAULT_REGION``         ``fs.s3a.endpoint.region``; delta-rs's ``AWS_REGION``
=================================================== =========================================================

:func:`s3a_settings` maps an environment to Spark settings (``spark.hadoop.fs.s3a.*``), and always maps the
``s3://`` scheme to s3a's file system (``fs.s3.impl``, and ``fs.AbstractFileSystem.s3.impl`` for the
``FileContext`` API that streaming checkpoints use), so a table may be written ``s3a://bucket/t`` or
``s3://bucket/t``. :func:`apply_s3a_settings` sets them on a running session's Hadoop configuration, except
those that ``spark-submit --conf`` (or ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf``, the builder) gave:
the explicit setting wins. :func:`deltalake_storage_options` maps the same environment to delta-rs's
``storage_options``. Nothing here logs a value: only the names of the settings.

Delta on S3 needs nothing more: delta-spark picks its ``S3SingleDriverLogStore`` for the ``s3``, ``s3a`` and
``s3n`` schemes by itself (one driver writes a table; concurrent writers from several drivers need the
DynamoDB log store, which is not set up here). delta-rs 1.6 commits with a conditional PUT
(``If-None-Match: *``), which S3 and the local server (``bin/s3-local``, moto) honour, so it needs neither a
lock nor ``AWS_S3_ALLOW_UNSAFE_RENAME``.

>>> env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "id",
...        "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}
>>> for key, value in sorted(s3a_settings(env).items()):
...     print(key, "=", value)
spark.hadoop.fs.AbstractFileSystem.s3.impl = org.apache.hadoop.fs.s3a.S3A
spark.hadoop.fs.s3.impl = org.apache.hadoop.fs.s3a.S3AFileSystem
spark.hadoop.fs.s3a.access.key = id
spark.hadoop.fs.s3a.aws.credentials.provider = org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider
spark.hadoop.fs.s3a.connection.ssl.enabled = false
spark.hadoop.fs.s3a.endpoint = http://127.0.0.1:9000
spark.hadoop.fs.s3a.endpoint.region = us-east-1
spark.hadoop.fs.s3a.path.style.access = true
spark.hadoop.fs.s3a.secret.key = secret
>>> deltalake_storage_options(env) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
...     "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}
True
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "S3_SCHEME_SETTINGS",
    "SPARK_HADOOP",
    "apply_s3a_settings",
    "deltalake_storage_options",
    "s3_endpoint",
    "s3a_settings",
]

log = logging.getLogger(__name__)

#: The prefix of a Spark setting that Spark copies into the Hadoop configuration (without it).
SPARK_HADOOP = "spark.hadoop."
#: ``s3://`` served by s3a (whatever the environment): the FileSystem and the FileContext implementations.
S3_SCHEME_SETTINGS = {
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
}
#: The endpoint variables, the service-specific one first (the AWS SDKs' order).
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
IGNORE_ENDPOINTS = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
TEMPORARY_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


def _get(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-blank value in ``environ``, with that value (stripped)."""
    for name in names:
        value = (environ.get(name) or "").strip()
        if value:
            return name, value
    return None


def s3_endpoint(environ: Mapping[str, str]) -> str | None:
    """The custom S3 endpoint the environment names (None: AWS's own endpoints).

    >>> s3_endpoint({"AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_S3": "http://b:2/"})
    'http://b:2'
    >>> s3_endpoint({"AWS_ENDPOINT_URL": "http://a:1", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}) is None
    True
    >>> s3_endpoint({"AWS_ENDPOINT_URL": "127.0.0.1:9000"})
    Traceback (most recent call last):
    ...
    ValueError: AWS_ENDPOINT_URL='127.0.0.1:9000' is not an http:// or https:// URL (e.g. http://127.0.0.1:9000)

    Raises
    ------
    ValueError
        If the variable holds something other than an ``http://`` or ``https://`` URL with a host.

    """
    if (environ.get(IGNORE_ENDPOINTS) or "").strip().lower() == "true":
        return None
    found = _get(environ, *ENDPOINT_VARIABLES)
    if found is None:
        return None
    name, value = found
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        msg = f"{name}={value!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:9000)"
        raise ValueError(msg)
    return value.rstrip("/")


def _keys(environ: Mapping[str, str]) -> tuple[str, str, str | None] | None:
    """The static credentials (key id, secret, session token or None), or None when no key is set."""
    key_id = _get(environ, "AWS_ACCESS_KEY_ID")
    secret = _get(environ, "AWS_SECRET_ACCESS_KEY")
    if key_id is None and secret is None:
        return None
    if key_id is None or secret is None:
        missing = "AWS_ACCESS_KEY_ID" if key_id is None else "AWS_SECRET_ACCESS_KEY"
        given = "AWS_SECRET_ACCESS_KEY" if key_id is None else "AWS_ACCESS_KEY_ID"
        msg = f"{given} is set but {missing} is not: set both (or neither, for the default credential chain)"
        raise ValueError(msg)
    token = _get(environ, "AWS_SESSION_TOKEN")
    return key_id[1], secret[1], None if token is None else token[1]


def s3a_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """Spark settings (``spark.hadoop.fs.s3a.*``, ``spark.hadoop.fs.s3.impl``) from the AWS environment.

    Parameters
    ----------
    environ : mapping of str to str
        The environment (``os.environ``); blank values count as unset.

    Returns
    -------
    dict of str to str
        Always the ``s3://`` mapping (:data:`S3_SCHEME_SETTINGS`); then, as the variables are set, the
        endpoint with path-style access (and no TLS for ``http:``), the region, and static credentials
        with the provider that reads them.

    Raises
    ------
    ValueError
        If the endpoint is not an http(s) URL, or only one of the access key id and the secret is set.

    >>> s3a_settings({}) == S3_SCHEME_SETTINGS
    True
    >>> settings = s3a_settings({"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s",
    ...                          "AWS_SESSION_TOKEN": "t", "AWS_DEFAULT_REGION": "eu-west-1"})
    >>> sorted(k.removeprefix("spark.hadoop.fs.s3a.") for k in settings if "s3a" in k)
    ['access.key', 'aws.credentials.provider', 'endpoint.region', 'secret.key', 'session.token']
    >>> settings["spark.hadoop.fs.s3a.aws.credentials.provider"] == TEMPORARY_PROVIDER
    True

    """
    settings = dict(S3_SCHEME_SETTINGS)
    s3a = SPARK_HADOOP + "fs.s3a."
    endpoint = s3_endpoint(environ)
    if endpoint is not None:
        settings[s3a + "endpoint"] = endpoint
        # A custom endpoint (a local server, MinIO, a private gateway) has no per-bucket DNS names.
        settings[s3a + "path.style.access"] = "true"
        if urlsplit(endpoint).scheme.lower() == "http":
            settings[s3a + "connection.ssl.enabled"] = "false"
    region = _get(environ, *REGION_VARIABLES)
    if region is not None:
        settings[s3a + "endpoint.region"] = region[1]
    keys = _keys(environ)
    if keys is not None:
        key_id, secret, token = keys
        settings[s3a + "access.key"] = key_id
        settings[s3a + "secret.key"] = secret
        if token is not None:
            settings[s3a + "session.token"] = token
        settings[s3a + "aws.credentials.provider"] = SIMPLE_PROVIDER if token is None else TEMPORARY_PROVIDER
    return settings


def deltalake_storage_options(environ: Mapping[str, str]) -> dict[str, str]:
    """delta-rs ``storage_options`` for ``s3://`` tables from the AWS environment (empty when none is set).

    The endpoint (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``) as ``AWS_ENDPOINT_URL``, with
    ``AWS_ALLOW_HTTP=true`` for an ``http:`` one; the keys and session token; the region
    (``AWS_REGION`` or ``AWS_DEFAULT_REGION``) as ``AWS_REGION``. delta-rs uses path-style requests unless
    told otherwise, and commits with conditional PUTs (no lock, no unsafe rename: module docstring).

    Raises
    ------
    ValueError
        As :func:`s3a_settings`.

    >>> deltalake_storage_options({})
    {}
    >>> deltalake_storage_options({"AWS_ENDPOINT_URL_S3": "https://s3.example.org", "AWS_REGION": "x"})
    {'AWS_ENDPOINT_URL': 'https://s3.example.org', 'AWS_REGION': 'x'}

    """
    options: dict[str, str] = {}
    endpoint = s3_endpoint(environ)
    if endpoint is not None:
        options["AWS_ENDPOINT_URL"] = endpoint
        if urlsplit(endpoint).scheme.lower() == "http":
            options["AWS_ALLOW_HTTP"] = "true"
    keys = _keys(environ)
    if keys is not None:
        key_id, secret, token = keys
        options["AWS_ACCESS_KEY_ID"] = key_id
        options["AWS_SECRET_ACCESS_KEY"] = secret
        if token is not None:
            options["AWS_SESSION_TOKEN"] = token
    region = _get(environ, *REGION_VARIABLES)
    if region is not None:
        options["AWS_REGION"] = region[1]
    return options


def apply_s3a_settings(spark: Any, environ: Mapping[str, str]) -> list[str]:
    """Set :func:`s3a_settings` on the running session's Hadoop configuration; return the keys set.

    A key that Spark's own configuration holds (``spark-submit --conf spark.hadoop.fs.s3a.endpoint=...``,
    ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf``, or the session's builder) is left as that gave it.
    :func:`jobs.common.session.build_session` calls it on every session it builds or returns; a session that
    was running before the environment was set (the test suite's, shared by its tests) gets the settings
    by a call of its own. Spark sends the driver's Hadoop configuration with every file read and write,
    so the executors see the keys as well; a file system s3a already opened for a bucket keeps the
    settings it was opened with (Hadoop caches one per bucket).

    Only the names of the keys are logged (at INFO), never their values.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The running session.
    environ : mapping of str to str
        The environment (``os.environ``).

    Returns
    -------
    list of str
        The Hadoop keys (without ``spark.hadoop.``) set by this call, sorted.

    Raises
    ------
    ValueError
        As :func:`s3a_settings`.

    """
    settings = s3a_settings(environ)
    given = spark.sparkContext.getConf()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    applied, kept = [], []
    for key, value in sorted(settings.items()):
        name = key.removeprefix(SPARK_HADOOP)
        if given.contains(key):
            kept.append(name)
            continue
        hadoop.set(name, value)
        applied.append(name)
    if len(settings) > len(S3_SCHEME_SETTINGS):
        log.info(
            "s3a settings from the AWS environment: %s%s",
            ", ".join(applied),
            f" (kept as Spark's configuration gives them: {', '.join(kept)})" if kept else "",
        )
    return applied

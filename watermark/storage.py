"""Where the pipeline's files live: every location a user gives, as a URI, and the one way to reach it.

Inputs, outputs, checkpoints, the watermark configuration and reports may each be a plain path, a
``file:`` URI, or a location on an object store or a distributed file system. :class:`Location` parses
one; the functions below read, write, list and delete through the file system that serves it (pyarrow's):

================ ===================================================================================
scheme           file system
================ ===================================================================================
none, ``file``   the local (or mounted) file system
``s3a`` ``s3``   Amazon S3 or an S3-compatible server (``s3n`` too), configured from the standard AWS
                 environment: ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID``,
                 ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or
                 ``AWS_DEFAULT_REGION``); without keys, the SDK's default chain (profiles, instance role)
``abfss`` ``abfs`` Azure Data Lake Storage Gen2: ``abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/path``
                 (credentials: ``AZURE_STORAGE_ACCOUNT_KEY`` or the default Azure chain)
``gs`` ``gcs``   Google Cloud Storage (application default credentials)
``hdfs``         HDFS (``hdfs://namenode:port/path``; needs the Hadoop client's ``libhdfs``)
================ ===================================================================================

No other module of the project applies ``os.path`` or ``pathlib`` to a location a user gives; Spark gets
:attr:`Location.spark` (the same URI), delta-rs the URI and its storage options
(:mod:`jobs.common.object_store`).

**What a write promises.** An object store has no rename and no fsync: an object becomes visible whole
when its PUT completes, and a PUT over an object replaces it whole. :func:`write_bytes` gives every file
system that contract: on an object store it is one PUT; on a local file system the bytes go to a
temporary name in the same folder, are fsynced, and the file is renamed over the target (keeping the mode
of the file it replaces, so a configuration published by one user stays readable by the job's), then the
folder is fsynced. Code above this module commits its state as write-once objects plus a marker written
last (see :mod:`jobs.stream.checkpoint.layout`), and never renames.

>>> loc = Location.of("s3a://bucket/tables/")
>>> loc, loc / "aggregates", (loc / "aggregates").name
(Location('s3a://bucket/tables'), Location('s3a://bucket/tables/aggregates'), 'aggregates')
>>> Location.of("file:///data/in").spark, Location.of("/data/./in/").spark
('/data/in', '/data/in')
>>> Location.of("ftp://host/x")
Traceback (most recent call last):
...
watermark.storage.StorageError: ftp://host/x: unsupported scheme 'ftp' (supported: a path, file:, s3a:, ...
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

#: Schemes by file system family.
LOCAL_SCHEMES = ("", "file")
S3_SCHEMES = ("s3a", "s3", "s3n")
AZURE_SCHEMES = ("abfss", "abfs")
GCS_SCHEMES = ("gs", "gcs")
HDFS_SCHEMES = ("hdfs",)
SCHEMES = LOCAL_SCHEMES + S3_SCHEMES + AZURE_SCHEMES + GCS_SCHEMES + HDFS_SCHEMES
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
#: Seconds before a request to an object store gives up (so that unreachable storage fails fast).
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0


class StorageError(ValueError):
    """A location that cannot be used: unknown scheme, malformed, missing bucket, unreachable storage."""


def _supported() -> str:
    return ", ".join(["a path"] + [f"{s}:" for s in SCHEMES if s])


@dataclass(frozen=True)
class Location:
    """A file or folder: a local absolute path, or ``scheme://authority/key`` on a remote store.

    ``scheme`` is empty for the local file system, ``authority`` the bucket, container or name node, and
    ``key`` the slash-separated path below it (absolute for a local path, without leading slash otherwise).
    """

    scheme: str
    authority: str
    key: str

    @classmethod
    def of(cls, where: str | os.PathLike[str] | Location) -> Location:
        """Parse a path or URI (a :class:`Location` is returned as is).

        Raises
        ------
        StorageError
            For an unsupported scheme, a remote URI without its bucket or host, or a ``..`` in a remote key.

        """
        if isinstance(where, Location):
            return where
        text = os.fspath(where)
        if not isinstance(text, str) or not text.strip():
            msg = f"a location must be a non-empty path or URI, got {where!r}"
            raise StorageError(msg)
        match = _SCHEME.match(text)
        if match is None:
            return cls("", "", _local(text))
        scheme = match.group(1).lower()
        if scheme not in SCHEMES:
            msg = f"{text}: unsupported scheme {scheme!r} (supported: {_supported()})"
            raise StorageError(msg)
        parts = urlsplit(text)
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                msg = f"{text}: a file: URI names no host (file:///absolute/path)"
                raise StorageError(msg)
            return cls("", "", _local(parts.path or "/"))
        if not parts.netloc:
            msg = f"{text}: no bucket, container or host after {scheme}://"
            raise StorageError(msg)
        segments = [s for s in parts.path.split("/") if s not in ("", ".")]
        if ".." in segments:
            msg = f"{text}: '..' is not allowed in a {scheme}: location"
            raise StorageError(msg)
        return cls(scheme, parts.netloc, "/".join(segments))

    # -- names ---------------------------------------------------------------------------------------
    @property
    def local(self) -> bool:
        """Whether the location is on the local (or a mounted) file system."""
        return self.scheme == ""

    def __str__(self) -> str:
        return self.spark

    def __repr__(self) -> str:
        return f"Location({self.spark!r})"

    @property
    def spark(self) -> str:
        """The location as Spark and Hadoop take it: a local absolute path, or the URI."""
        if self.local:
            return self.key
        return (
            f"{self.scheme}://{self.authority}/{self.key}"
            if self.key
            else f"{self.scheme}://{self.authority}"
        )

    @property
    def uri(self) -> str:
        """The location as a URI (``file://`` for a local path)."""
        return f"file://{self.key}" if self.local else self.spark

    @property
    def name(self) -> str:
        """The last component ('' at a bucket's root)."""
        return posixpath.basename(self.key)

    @property
    def parent(self) -> Location:
        """The folder holding this location (itself at a root)."""
        return Location(
            self.scheme, self.authority, posixpath.dirname(self.key) if self.local else _up(self.key)
        )

    def __truediv__(self, name: str) -> Location:
        """The location ``name`` below this one; ``name`` may hold slashes but no ``..`` or empty parts."""
        segments = name.split("/")
        if not name or any(s in ("", ".", "..") for s in segments):
            msg = f"{name!r} is not a relative name below {self}"
            raise StorageError(msg)
        return Location(self.scheme, self.authority, posixpath.join(self.key, name) if self.key else name)

    def relative_to(self, base: Location) -> str:
        """The name of this location below ``base`` (``a/b``); raises :class:`StorageError` outside it."""
        prefix = base.key.rstrip("/") + "/" if base.key else ""
        if (self.scheme, self.authority) != (base.scheme, base.authority) or not self.key.startswith(prefix):
            msg = f"{self} is not below {base}"
            raise StorageError(msg)
        return self.key[len(prefix) :]

    # -- the file system -------------------------------------------------------------------------------
    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The file system (pyarrow's) serving this location, and the path to give it."""
        if self.local:
            return _local_fs(), self.key
        if self.scheme in S3_SCHEMES:
            return _s3_fs(_aws_settings(os.environ)), f"{self.authority}/{self.key}".rstrip("/")
        if self.scheme in AZURE_SCHEMES:
            container, _, account = self.authority.partition("@")
            return _azure_fs(account.split(".")[0]), f"{container}/{self.key}".rstrip("/")
        if self.scheme in GCS_SCHEMES:
            return _gcs_fs(), f"{self.authority}/{self.key}".rstrip("/")
        host, _, port = self.authority.partition(":")
        return _hdfs_fs(host, int(port or 8020)), "/" + self.key


def _local(text: str) -> str:
    # The one place a user's local path is made absolute (relative to the working directory).
    return posixpath.normpath(os.path.abspath(text))


def _up(key: str) -> str:
    return key.rsplit("/", 1)[0] if "/" in key else ""


@functools.cache
def _local_fs() -> pafs.FileSystem:
    return pafs.LocalFileSystem()


def _aws_settings(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    names = (
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    )
    return tuple((name, environ[name]) for name in names if environ.get(name))


def s3_filesystem_options(environ: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments of pyarrow's ``S3FileSystem`` from the standard AWS environment variables.

    >>> opts = s3_filesystem_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"})
    >>> opts["endpoint_override"], opts["scheme"], opts["region"]
    ('127.0.0.1:9000', 'http', 'eu-west-1')
    """
    out: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S, "request_timeout": REQUEST_TIMEOUT_S}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        out["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        out["scheme"] = parts.scheme
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        out["region"] = region
    elif endpoint:
        out["region"] = "us-east-1"  # a custom endpoint: no region to discover
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        out["access_key"] = environ["AWS_ACCESS_KEY_ID"]
        out["secret_key"] = environ["AWS_SECRET_ACCESS_KEY"]
        if environ.get("AWS_SESSION_TOKEN"):
            out["session_token"] = environ["AWS_SESSION_TOKEN"]
    return out


@functools.lru_cache(maxsize=8)
def _s3_fs(settings: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    return pafs.S3FileSystem(**s3_filesystem_options(dict(settings)))


@functools.lru_cache(maxsize=8)
def _azure_fs(account: str) -> pafs.FileSystem:
    key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if key:
        return pafs.AzureFileSystem(account_name=account, account_key=key)
    return pafs.AzureFileSystem(account_name=account)


@functools.cache
def _gcs_fs() -> pafs.FileSystem:
    return pafs.GcsFileSystem()


@functools.lru_cache(maxsize=8)
def _hdfs_fs(host: str, port: int) -> pafs.FileSystem:
    try:
        return pafs.HadoopFileSystem(host, port)
    except OSError as exc:
        msg = f"hdfs://{host}:{port}: cannot reach HDFS from Python ({exc}; it needs Hadoop's libhdfs)"
        raise StorageError(msg) from None


# -- reading and writing ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One entry of a folder listing."""

    location: Location
    is_dir: bool
    size: int | None
    mtime_ms: int | None

    @property
    def name(self) -> str:
        """The entry's name in its folder."""
        return self.location.name


def _entry(loc: Location, info: pafs.FileInfo) -> Entry | None:
    if info.type == pafs.FileType.NotFound:
        return None
    mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None
    return Entry(loc, info.type == pafs.FileType.Directory, info.size, mtime)


def _failure(loc: Location, what: str, exc: Exception) -> OSError:
    """An OSError naming the location, for a file system's own error."""
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(f"{loc}: {what}: not found")
    return OSError(f"{loc}: {what} failed: {exc}")


def info(where: str | Location) -> Entry | None:
    """What is at ``where`` (a file, a folder, or None)."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        return _entry(loc, fs.get_file_info(path))
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "stat", exc) from None


def exists(where: str | Location) -> bool:
    """Whether a file or a (non-empty, on object stores) folder is at ``where``."""
    return info(where) is not None


def is_file(where: str | Location) -> bool:
    """Whether a file is at ``where``."""
    found = info(where)
    return found is not None and not found.is_dir


def listdir(where: str | Location) -> list[Entry]:
    """The entries of the folder ``where``, by name; none when it does not exist."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except NotADirectoryError:
        return []
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "list", exc) from None
    out = []
    for item in infos:
        entry = _entry(loc / posixpath.basename(item.path.rstrip("/")), item)
        if entry is not None:
            out.append(entry)
    return sorted(out, key=lambda e: e.name)


def walk_files(where: str | Location) -> list[Entry]:
    """Every file below the folder ``where`` (recursively), by location; none when it does not exist."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "list", exc) from None
    out = []
    for item in infos:
        if item.type == pafs.FileType.File:
            entry = _entry(loc / item.path[len(path) :].strip("/"), item)
            if entry is not None:
                out.append(entry)
    return sorted(out, key=lambda e: e.location.key)


def read_bytes(where: str | Location) -> bytes:
    """The whole content of the file ``where`` (FileNotFoundError when it does not exist)."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        with fs.open_input_stream(path) as stream:
            return bytes(stream.read())
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "read", exc) from None


def open_input_file(where: str | Location) -> Any:
    """The file ``where`` opened for random access (a pyarrow ``NativeFile``: Parquet footers, Arrow IPC)."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        return fs.open_input_file(path)
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "open", exc) from None


def read_text(where: str | Location) -> str:
    """The file ``where`` as UTF-8 text."""
    return read_bytes(where).decode("utf-8")


def write_bytes(where: str | Location, data: bytes, *, mtime_ns: int | None = None) -> None:
    """Write the file ``where`` whole: readers see the old content or the new one, never a part.

    An object store: one PUT. A local file system: a temporary file in the same folder, fsynced, renamed
    over the target (which keeps its mode), and the folder fsynced. Parent folders are created as needed.
    ``mtime_ns`` sets a local file's modification time before it appears (an object store sets its own).
    """
    loc = Location.of(where)
    if loc.local:
        _write_local(loc.key, data, mtime_ns)
        return
    fs, path = loc.filesystem()
    try:
        with fs.open_output_stream(path) as stream:
            stream.write(data)
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "write", exc) from None


def write_text(where: str | Location, text: str) -> None:
    """:func:`write_bytes` of UTF-8 text."""
    write_bytes(where, text.encode("utf-8"))


def _write_local(target: str, data: bytes, mtime_ns: int | None = None) -> None:
    folder = posixpath.dirname(target)
    os.makedirs(folder, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{posixpath.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def make_dirs(where: str | Location) -> None:
    """Create the folder ``where`` and its parents (object stores have no folders: nothing to do)."""
    loc = Location.of(where)
    if loc.local:
        os.makedirs(loc.key, exist_ok=True)


def remove(where: str | Location) -> None:
    """Delete the file ``where`` (nothing when it does not exist)."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        return
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "delete", exc) from None


def remove_tree(where: str | Location) -> None:
    """Delete the folder ``where`` and everything below it (nothing when it does not exist)."""
    loc = Location.of(where)
    fs, path = loc.filesystem()
    try:
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
        fs.delete_dir(path)
    except FileNotFoundError:
        return
    except (OSError, pa.ArrowException) as exc:
        raise _failure(loc, "delete", exc) from None


def replace_local(source: str | Location, target: str | Location) -> None:
    """Rename ``source`` over ``target`` on a local file system (checkpoints of earlier versions only)."""
    src, dst = Location.of(source), Location.of(target)
    if not (src.local and dst.local):
        msg = f"cannot rename {src} to {dst}: renames are for local checkpoints of earlier versions only"
        raise StorageError(msg)
    os.replace(src.key, dst.key)


def check_reachable(where: str | Location, what: str) -> None:
    """Fail with one clear :class:`StorageError` when ``where``'s bucket or store cannot be used.

    A local location is always usable (its folders are created on first write). On an object store the
    bucket (or container) must exist and answer.
    """
    loc = Location.of(where)
    if loc.local:
        return
    fs, path = loc.filesystem()
    root = path.split("/", 1)[0] if loc.scheme not in HDFS_SCHEMES else "/"
    try:
        found = fs.get_file_info(root)
    except (OSError, pa.ArrowException) as exc:
        msg = f"{what} {loc}: the storage cannot be reached ({_first_line(exc)})"
        raise StorageError(msg) from None
    if found.type == pafs.FileType.NotFound:
        msg = f"{what} {loc}: bucket or container {root!r} does not exist"
        raise StorageError(msg)


def checked(where: str | Location, what: str) -> str:
    """``where`` as Spark takes it, once :func:`check_reachable` passed (``what`` names it in errors)."""
    loc = Location.of(where)
    check_reachable(loc, what)
    return loc.spark


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

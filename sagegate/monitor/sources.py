"""Where ``sagegate monitor`` reads captures: a window's capture files from a local folder or an
``s3://`` prefix, streamed one file at a time (regular files only): ``*.jsonl`` and Firehose's
``*.jsonl.gz`` (decompressed as read), chosen for a window as
:mod:`chalicelib.monitor.capture_format` says. A folder or prefix above the endpoints' is
refused: it would mix every endpoint's captures, or find none of a window's hour folders and
report an empty window."""
from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.aws import S3_SCHEME, S3Uri
from chalicelib.monitor import capture_format, windows
from sagegate.monitor.files import SourceError, open_regular

_YEAR = re.compile(r"^\d{4}\Z")
_PROBE = 50
"""Folders listed at most at each level to tell an endpoint's folder from the one above (each S3
list costs a call)."""
Files = Iterator[tuple[str, Iterable[str | bytes]]]
"""(name for messages, the file's lines) for each capture file, in order."""
Children = Callable[[str], list[str]]


def is_capture_source(source: str) -> bool:
    return source.startswith(S3_SCHEME) or Path(source).is_dir()


# An S3 window of up to this many hours lists each hour's prefix (one call an hour, the
# fewest for the hourly check); a longer one walks the year/month/day/hour prefixes instead.
PROBE_HOURS = 24


def capture_files(source: str, start: datetime.datetime | None = None,
                  end: datetime.datetime | None = None, command: str = "check") -> Files:
    """The capture files under an endpoint's folder or prefix, only those of ``[start, end)``'s
    hours when a window is given (walked as they exist:
    :func:`chalicelib.monitor.windows.hour_folders`). Listed when the first is asked for, then
    opened one at a time.

    Raises:
        SourceError: the source does not exist, is above the endpoints' folders (``command`` is
            the one its message suggests), or holds a ``*.jsonl`` that is not a regular file.
    """
    yield from open_captures(source, [name for name, _size in
                                      capture_objects(source, start, end, command)])


def capture_objects(source: str, start: datetime.datetime | None = None,
                    end: datetime.datetime | None = None,
                    command: str = "check") -> list[tuple[str, int]]:
    """The files :func:`capture_files` reads, listed not opened: (name, size), a name a path or
    an ``s3://`` URI as :func:`open_captures` takes it (so another process can read a part).

    Raises:
        SourceError: as :func:`capture_files` (a non-regular ``*.jsonl`` only when opened).
    """
    if source.startswith(S3_SCHEME):
        return _s3_listed(source, start, end, command)
    return [(str(path), _size(path)) for path in _local_paths(Path(source), start, end,
                                                              command)]


def open_captures(source: str, names: Iterable[str]) -> Files:
    """Each capture file named, opened in its turn, with its lines.

    Raises:
        SourceError: not a regular file or unreadable; S3 refused (the message names ``source``).
    """
    clients: list[Any] = []  # one S3 client, made for the first S3 object
    for name in names:
        if name.startswith(S3_SCHEME):
            if not clients:
                clients.append(_s3_client())
            yield name, _s3_lines(clients[0], source, name)
        else:
            with open_regular(name) as handle:  # a FIFO or a folder named *.jsonl: one line
                yield name, capture_format.gzip_lines(handle, name) \
                    if capture_format.is_gzip(name) else capture_format.plain_lines(handle, name)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # gone since it was listed: opening it says so, in its turn
        return 0


def variant_folders(children: Children, source: str, command: str = "check") -> list[str]:
    """A capture source's variant folders (``[""]`` for a variant's own): a variant's folder
    holds year folders, an endpoint's its variants'.

    Raises:
        SourceError: ``source`` is above the endpoints' (year folders three levels down): its
            window would mix every endpoint's captures, or find none. The message names a few
            endpoints and the command to run instead.
    """
    top = sorted(children(""))
    if _has_year(top):
        return [""]
    probed = top[:_PROBE]
    if any(_has_year(children(name)) for name in probed):
        return top
    endpoints: list[str] = []
    for name in probed:
        if any(_has_year(children(f"{name}/{variant}")) for variant in children(name)[:_PROBE]):
            endpoints.append(name)
            if len(endpoints) > _SHOWN_ENDPOINTS:
                break
    if endpoints:
        raise SourceError(_above_endpoints(source, endpoints, command))
    return top


_SHOWN_ENDPOINTS = 3


def _has_year(names: Iterable[str]) -> bool:
    return any(_YEAR.match(name) for name in names)


def _above_endpoints(source: str, endpoints: list[str], command: str) -> str:
    shown = ", ".join(endpoints[:_SHOWN_ENDPOINTS])
    if len(endpoints) > _SHOWN_ENDPOINTS:
        shown += ", ..."
    example = f"{source.rstrip('/')}/{endpoints[0]}"
    advice = "check each endpoint's folder on its own" if command == "check" \
        else "give one endpoint's folder"
    return (f"{source}: a folder above the endpoints' capture folders ({shown}): {advice}, "
            f"e.g. sagegate monitor {command} {example} ...")


def _local_paths(root: Path, start: datetime.datetime | None,
                 end: datetime.datetime | None, command: str) -> list[Path]:
    if not root.is_dir():
        raise SourceError(f"{root}: no such folder")
    variants = variant_folders(_subfolders(root), str(root), command)
    if start is None or end is None:
        return sorted(path for path in root.rglob(_GLOB) if capture_format.is_capture(path.name))
    first, last = capture_format.listing_span(start, end)
    chosen = []
    for variant in variants:
        for folder in windows.hour_folders(_subfolders(root / variant), first, last):
            hour = capture_format.key_hour(f"{folder}/x")
            for path in sorted((root / variant / folder).glob(_GLOB)):
                if hour is not None and capture_format.wanted(path.name, hour, start, end,
                                                              _modified(path)):
                    chosen.append(path)
    return chosen


_GLOB = "*.jsonl*"


def _modified(path: Path) -> datetime.datetime | None:
    """A file's modification time (``aws s3 sync`` gives it the object's ``LastModified``)."""
    try:
        return datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
    except OSError:  # gone since it was listed: opening it says so
        return None


def _subfolders(variant: Path) -> Children:
    def children(path: str) -> list[str]:
        try:
            return [entry.name for entry in (variant / path).iterdir() if entry.is_dir()]
        except OSError:
            return []

    return children


def _s3_listed(source: str, start: datetime.datetime | None,
               end: datetime.datetime | None, command: str) -> list[tuple[str, int]]:
    from botocore.exceptions import BotoCoreError, ClientError  # deferred: s3:// sources only

    try:
        uri = S3Uri.parse(source)
    except ValueError as error:
        raise SourceError(f"{source}: {error}") from None
    try:
        return list(_s3_objects(source, uri, start, end, command))
    except (BotoCoreError, ClientError) as error:  # one line, not a traceback
        raise SourceError(f"{source}: {error}") from None


def _s3_lines(s3: Any, source: str, name: str) -> Iterator[bytes]:
    from botocore.exceptions import BotoCoreError, ClientError  # deferred: s3:// sources only

    uri = S3Uri.parse(name)
    try:
        body = s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"]
        yield from capture_format.gzip_lines(body, name) if capture_format.is_gzip(uri.key) \
            else capture_format.plain_lines(body, name)
    except (BotoCoreError, ClientError) as error:  # one line, not a traceback
        raise SourceError(f"{source}: {error}") from None


def _s3_client() -> Any:
    return awsclients.build("s3", aws.CLI)  # boto3 imported then: only for an s3:// source


def _s3_objects(source: str, uri: S3Uri, start: datetime.datetime | None,
                end: datetime.datetime | None, command: str) -> Iterator[tuple[str, int]]:
    bucket, prefix = uri.bucket, uri.prefix
    folder = f"{prefix}/" if prefix else ""
    s3 = _s3_client()
    children = _s3_folders(s3, bucket, folder)
    variants = variant_folders(children, source, command)
    if start is None or end is None:
        prefixes = [folder]
    else:
        listed = capture_format.listing_span(start, end)
        prefixes = [f"{folder}{_join(variant, hour)}/" for variant in variants
                    for hour in _s3_hour_folders(children, variant, *listed)]
    for key_prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                  Prefix=key_prefix):
            for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
                if _chosen(item, start, end):
                    yield f"{S3_SCHEME}{bucket}/{item['Key']}", int(item.get("Size", 0))


def _chosen(item: dict[str, Any], start: datetime.datetime | None,
            end: datetime.datetime | None) -> bool:
    key = str(item["Key"])
    if start is None or end is None:
        return capture_format.is_capture(key)
    hour = capture_format.key_hour(key)
    return hour is not None and capture_format.wanted(key, hour, start, end,
                                                      item.get("LastModified"))


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def _s3_folders(s3: Any, bucket: str, folder: str) -> Children:
    """The folders under ``folder``, each listed once (the layout's check and the window's walk
    ask for the same ones)."""
    listed: dict[str, list[str]] = {}

    def children(path: str) -> list[str]:
        if path not in listed:
            under = f"{folder}{path}/" if path else folder
            listed[path] = [p[len(under):].rstrip("/") for p in _s3_children(s3, bucket, under)]
        return listed[path]

    return children


def _s3_hour_folders(children: Children, variant: str, start: datetime.datetime,
                     end: datetime.datetime) -> Iterable[str]:
    if end - start <= PROBE_HOURS * windows.HOUR:
        return [windows.hour_folder(hour) for hour in windows.hours(start, end)]
    return windows.hour_folders(lambda path: children(_join(variant, path)), start, end)


def _s3_children(s3: Any, bucket: str, folder: str) -> list[str]:
    children: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder,
                                                              Delimiter="/"):
        children.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
    return sorted(children)

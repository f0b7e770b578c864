"""Lambda's event dicts, as the job functions read them: the object keys of an S3
notification (one per record, URL-decoded as S3 sends them encoded) and the messages of an
SNS delivery. Whatever is not of that shape is skipped (and logged by the caller)."""
from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any


def _records(event: Any) -> list[Mapping[str, Any]]:
    records = event.get("Records") if isinstance(event, Mapping) else None
    return [record for record in records or () if isinstance(record, Mapping)] \
        if isinstance(records, list) else []


def s3_keys(event: Any, bucket: str) -> list[str]:
    """The keys of the objects an S3 notification is about, in ``bucket`` only."""
    keys = []
    for record in _records(event):
        s3 = record.get("s3")
        if not isinstance(s3, Mapping):
            continue
        name = (s3.get("bucket") or {}).get("name")
        key = (s3.get("object") or {}).get("key")
        if name == bucket and isinstance(key, str):
            keys.append(urllib.parse.unquote_plus(key))
    return keys


def sns_messages(event: Any) -> list[str]:
    """The messages of an SNS delivery."""
    messages = []
    for record in _records(event):
        sns = record.get("Sns")
        message = sns.get("Message") if isinstance(sns, Mapping) else None
        if isinstance(message, str):
            messages.append(message)
    return messages

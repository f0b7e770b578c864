"""Cache keys: a SHA-256 digest of everything that changes the endpoint's answer, versioned."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

KEY_BYTES = 16
KEY_VERSION = b"sagegate-cache-2"  # hashed first: change it to re-key every entry


def cache_key(fields: Mapping[str, Any], body: bytes) -> str:
    """The key of ``body`` sent with ``fields`` (JSON-able values): 32 hex digits."""
    header = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str).encode()
    digest = hashlib.sha256(KEY_VERSION)
    digest.update(len(header).to_bytes(8, "big"))  # no header/body split is ambiguous
    digest.update(header)
    digest.update(body)
    return digest.hexdigest()[:2 * KEY_BYTES]


def file_digest(path: Any) -> str:
    """The content hash of a file (a handler file's, for the key)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, hashlib.sha256).hexdigest()

"""The 413 for a body over ``MAX_BODY_BYTES`` names the way that takes far more: a job on an
upload, and the command that does it all (the client sends a 413 that names the job route
again as a job: ``tests/unit/test_client_auto.py``)."""
from __future__ import annotations

import pytest

from chalicelib.core.errors import PayloadTooLargeError
from chalicelib.reading import bodies


@pytest.mark.parametrize("content_type", ["image/jpeg", "application/json"])
def test_the_413_names_the_job_route_with_an_upload_and_predict_async(
        content_type: str) -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        bodies.read_upload(b"x" * 2049, content_type, None, max_body_bytes=2048)
    message = caught.value.message
    assert "POST /uploads" in message and "POST /models/{name}/jobs" in message
    assert '{"upload_id": ...}' in message and "sagegate predict --async" in message
    assert "resize" in message  # the old advice stays first

"""Local SageMaker runtime emulator serving real ONNX models (development only).

Run ``python -m emulator``; see ``emulator/README.md``. Never packaged into Lambda. This
module stays import-light: the heavy parts (numpy, OpenCV, ONNX Runtime) load on demand.
"""

from __future__ import annotations

READY_PREFIX = "emulator: serving endpoints"
"""Start of the line printed on stdout once the server listens."""


def ready_line(endpoints: list[str], url: str) -> str:
    """Returns the line printed on stdout once the server listens.

    Args:
        endpoints: the endpoint names served.
        url: the base URL, ``http://host:port``.

    Returns:
        ``emulator: serving endpoints [a, b] on http://127.0.0.1:8080``.
    """
    return f"{READY_PREFIX} [{', '.join(endpoints)}] on {url}"

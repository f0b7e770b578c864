"""Shared fixtures for every tier."""
from __future__ import annotations

import pytest

from tests import imagefactory


@pytest.fixture(scope="session")
def jpeg_640() -> bytes:
    return imagefactory.jpeg(640, 480)

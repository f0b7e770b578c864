"""The container-wide objects requests share, built once by one builder.

A Lambda container serves many requests; the settings, the prediction pipeline (with its
boto3 client and connection pool) and the data capture sink are built on first use and kept.
:class:`Services` is that builder: ``app.py`` holds one (``app.services``), and a test that
needs other parts builds its own and puts it there (``Services(settings, predictor=...)``):
whatever it is not given, it builds from the settings as the real one does.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from chalicelib import lifecycle
from chalicelib.capture import Capturer
from chalicelib.config import Settings
from chalicelib.pipeline import Predictor


class Services:
    """Settings, predictor and capturer: each built on first use, once, then kept.

    Args:
        settings: the settings; read from the environment on first use when None.
        predictor: a ready predictor; built from the settings when None.
        capturer: a ready capturer; built from the settings when None.
        read_settings: how settings are read when not given (``Settings.from_env``).
    """

    def __init__(self, settings: Settings | None = None, *, predictor: Predictor | None = None,
                 capturer: Capturer | None = None,
                 read_settings: Callable[[], Settings] = Settings.from_env) -> None:
        self._settings = settings
        self._predictor = predictor
        self._capturer = capturer
        self._read_settings = read_settings
        self._lock = threading.Lock()  # one object is built at a time, and only once

    @property
    def settings(self) -> Settings:
        """The settings (a misconfiguration raises ``ConfigurationError`` on every use)."""
        if self._settings is None:
            self._settings = self._read_settings()
        return self._settings

    @property
    def predictor(self) -> Predictor:
        """The prediction pipeline with its boto3 client."""
        with self._lock:
            if self._predictor is None:
                self._predictor = build_predictor(self.settings)
            return self._predictor

    @property
    def capturer(self) -> Capturer:
        """Data capture as configured (``CAPTURE_*``)."""
        with self._lock:
            if self._capturer is None:
                s = self.settings
                self._capturer = Capturer.from_settings(
                    s.capture_mode, s.capture_destination, s.capture_sampling_percentage,
                    s.capture_original, s.capture_max_bytes)
            return self._capturer

    def warm_up(self, prime_codecs: bool = True) -> None:
        """Build everything and, with ``prime_codecs``, run the image path once (endpoint
        aside) so OpenCV's lazy set-up is done too.

        Called at import on Lambda (the init phase), so no request pays for it. Priming the
        codecs is only worth it where init is off every request's path (SnapStart's snapshot,
        provisioned concurrency): on an on-demand cold start it would add its cost to the
        first request's wait even when that request needs less (a JPEG passed through).
        """
        predictor = self.predictor
        _ = self.capturer
        if prime_codecs:
            predictor.warm_up()

    def connection_holders(self) -> list[lifecycle.Closable]:
        """The built objects that pool connections (closed around a SnapStart snapshot)."""
        return [holder for holder in (self._predictor, self._capturer) if holder is not None]


def build_predictor(settings: Settings) -> Predictor:
    """The predictor the settings describe: a boto3 client for the endpoint, the labels."""
    from chalicelib.endpoint import EndpointClient, make_client, policy_from
    from chalicelib.predictions import load_labels

    client = EndpointClient(make_client(settings), policy_from(settings))
    return Predictor(settings, client, load_labels(settings.labels))

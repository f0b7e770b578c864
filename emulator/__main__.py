"""Command line: ``python -m emulator --config emulator/config.json --port 8080``.

:func:`main` takes the program name for its usage and help (``python -m emulator`` by
default), so another command line can run it as one of its subcommands.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from emulator import ready_line
from emulator.asyncinvoke import build_async
from emulator.config import ConfigError, load_config
from emulator.journal import Journal, JournalError
from emulator.loader import build_runtime
from emulator.server import EmulatorServer

ENV_CONFIG = "EMULATOR_CONFIG"
ENV_HOST = "EMULATOR_HOST"
ENV_PORT = "EMULATOR_PORT"
ENV_SEED = "EMULATOR_SEED"
ENV_S3 = "EMULATOR_S3_ENDPOINT_URL"
ENV_SNS = "EMULATOR_SNS_ENDPOINT_URL"
ENV_OUTBOX = "EMULATOR_ASYNC_OUTBOX"
ENV_STATE_DIR = "EMULATOR_STATE_DIR"
DEFAULT_CONFIG = Path(__file__).with_name("config.json")
STATE_ROOT = Path(__file__).resolve().parent.parent / "build" / "emulator-state"
"""Where an emulator on a fixed port keeps its asynchronous queue by default
(``<STATE_ROOT>/<port>``): the project's scratch folder, ignored by git, emptied by ``make
clean``. A restart on the same port (``make run``'s supervisor) finds it there."""
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
SHUTDOWN_GRACE_S = 5.0
PROG = "python -m emulator"
DESCRIPTION = ("Serve SageMaker runtime endpoints (the InvokeEndpoint wire protocol) on this "
               "machine from real ONNX models, for development and tests. Prints one ready "
               "line on stdout once it listens; SIGINT or SIGTERM stops it.")
LOG = logging.getLogger("emulator")


def parse_args(argv: Sequence[str] | None, environ: Mapping[str, str],
               prog: str = PROG) -> argparse.Namespace:
    """Reads the options; an explicit flag beats its environment variable beats the default.

    Args:
        argv: the arguments (None for ``sys.argv[1:]``).
        environ: the environment (``EMULATOR_CONFIG``, ``EMULATOR_HOST``, ``EMULATOR_PORT``,
            ``EMULATOR_SEED``).
        prog: the program name in usage and error messages.

    Returns:
        ``config`` (Path), ``host`` (str), ``port`` (int, 0 = any free port), ``seed``,
        ``s3_endpoint_url``, ``sns_endpoint_url``, ``async_outbox``, ``state_dir`` (Path or
        None) and ``state_dir_given`` (whether it was asked for, rather than the default).
    """
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--config", type=Path, default=environ.get(ENV_CONFIG, DEFAULT_CONFIG),
                        help=f"the endpoints and models ({ENV_CONFIG}; default "
                             "emulator/config.json)")
    parser.add_argument("--host", default=environ.get(ENV_HOST, DEFAULT_HOST),
                        help=f"the address to bind ({ENV_HOST}; default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=environ.get(ENV_PORT, DEFAULT_PORT),
                        help=f"the port, 0 for any free one ({ENV_PORT}; default "
                             f"{DEFAULT_PORT})")
    parser.add_argument("--seed", type=int, default=environ.get(ENV_SEED) or None,
                        help=f"makes traffic split and random faults repeatable ({ENV_SEED})")
    parser.add_argument("--s3-endpoint-url", default=environ.get(ENV_S3) or None,
                        help="where asynchronous endpoints read inputs and write results "
                             f"({ENV_S3}; default: boto3's own, e.g. AWS_ENDPOINT_URL_S3)")
    parser.add_argument("--sns-endpoint-url", default=environ.get(ENV_SNS) or None,
                        help="where asynchronous endpoints publish notifications "
                             f"({ENV_SNS}; default: the S3 endpoint URL)")
    parser.add_argument("--async-outbox", type=Path, default=environ.get(ENV_OUTBOX) or None,
                        help="a JSON Lines file each asynchronous completion is appended to "
                             f"({ENV_OUTBOX}; default: none)")
    _state_options(parser, environ)
    args = parser.parse_args(argv)
    if args.async_outbox is not None:
        args.async_outbox = Path(args.async_outbox)
    args.config, args.port = Path(args.config), int(args.port)
    args.seed = None if args.seed is None else int(args.seed)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port/{ENV_PORT} must be 0..65535, got {args.port}")
    _state_dir(args)
    return args


def _state_options(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    parser.add_argument("--state-dir", type=Path, default=environ.get(ENV_STATE_DIR) or None,
                        help="where queued and running asynchronous invocations are kept, so "
                             f"they survive a restart ({ENV_STATE_DIR}; default: "
                             "build/emulator-state/PORT for a fixed port, none for port 0)")
    parser.add_argument("--no-state-dir", action="store_true",
                        help="keep the asynchronous queue in memory only")


def _state_dir(args: argparse.Namespace) -> None:
    """Settles ``state_dir``: given, the default of a fixed port, or none. Port 0 has no
    default: a restart could not find that emulator again, and the test runs that use it
    must not pick up one another's invocations."""
    args.state_dir_given = args.state_dir is not None and not args.no_state_dir
    if args.no_state_dir:
        args.state_dir = None
    elif args.state_dir is not None:
        args.state_dir = Path(args.state_dir)
    elif args.port:
        args.state_dir = STATE_ROOT / str(args.port)


def _stop_on_signals(server: EmulatorServer) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        LOG.info("signal %d: shutting down", signum)
        # shutdown() waits for serve_forever(), which runs in this (the main) thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _journal(args: argparse.Namespace) -> Journal | None:
    """The state directory's journal; None without one. A default directory that cannot be
    used (read-only, held) is logged and the queue kept in memory; a given one stops the
    start (JournalError)."""
    if args.state_dir is None:
        return None
    try:
        return Journal(args.state_dir)
    except JournalError as error:
        if args.state_dir_given:
            raise
        LOG.warning("%s; the asynchronous queue is in memory only", error)
        return None


def _start(args: argparse.Namespace) -> EmulatorServer:
    config = load_config(args.config)
    runtime = build_runtime(config, args.seed)
    has_async = any(endpoint.asynchronous is not None for endpoint in config.endpoints.values())
    journal = _journal(args) if has_async else None
    service = build_async(runtime, args.s3_endpoint_url, args.sns_endpoint_url,
                          args.async_outbox, journal)  # fmt: skip
    server = EmulatorServer((args.host, args.port), runtime, service)
    if service is not None:  # only once the port is ours: a refused start runs nothing
        service.resume()
    return server


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Serves until SIGINT or SIGTERM.

    Args:
        argv: command-line arguments (None for ``sys.argv[1:]``).
        prog: the program name in usage and error messages (``sagegate emulator`` there).

    Returns:
        0 after a clean shutdown; 2 when the configuration, a model or the port is unusable.
    """
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse_args(argv, os.environ, prog)
    try:
        server = _start(args)
    except (ConfigError, OSError) as error:
        print(f"emulator: cannot start: {error}", file=sys.stderr, flush=True)
        return 2
    _stop_on_signals(server)
    endpoints = list(server.runtime.config.endpoints)
    print(ready_line(endpoints, server.url), flush=True)
    try:
        server.serve_forever(poll_interval=0.25)
    finally:
        server.server_close()
        if server.asynchronous is not None:
            server.asynchronous.stop(SHUTDOWN_GRACE_S)
        if not server.in_flight.wait_idle(SHUTDOWN_GRACE_S):
            LOG.info("requests still running after %.0f s; exiting anyway", SHUTDOWN_GRACE_S)
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

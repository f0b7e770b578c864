"""Crafted images that cost far more to decode than their size says (generated, never stored).

A progressive JPEG's decoder makes one pass over every coefficient of the image per scan, and
nothing in the format limits how many scans a file has: a valid greyscale progressive JPEG
that repeats one AC scan thousands of times weighs a megabyte and takes libjpeg tens of
seconds (libjpeg-turbo's own tools take a scan limit for this reason). :func:`scan_bomb`
builds one from a real progressive encode, so the tests and ``bench/worstcase.py`` make it
on the fly::

    python -m scripts.crafted_images scan-bomb --side 6320 --scans 15000 bomb.jpg
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np

_SOS, _EOI = 0xDA, 0xD9


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, start, end) of every marker segment, a scan's entropy data included."""
    found, pos = [], 2
    while pos < len(data) - 1:
        if data[pos] != 0xFF:
            raise ValueError("not a marker where one was expected")
        marker = data[pos + 1]
        if marker == _EOI:
            found.append((marker, pos, pos + 2))
            break
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        end = pos + 2 + length
        if marker == _SOS:  # the entropy-coded data runs to the next non-RST marker
            end = _scan_end(data, end)
        found.append((marker, pos, end))
        pos = end
    return found


def _scan_end(data: bytes, pos: int) -> int:
    while True:
        pos = data.index(b"\xff", pos)
        following = data[pos + 1]
        if following == 0x00 or 0xD0 <= following <= 0xD7:
            pos += 2
            continue
        return pos


def progressive(side: int, colour: bool = False) -> bytes:
    """A real progressive JPEG of ``side`` x ``side``: a smooth ramp, so that its AC scans are
    a few bytes each (every block's AC coefficients are zero: one end-of-band run)."""
    ramp = np.linspace(64, 192, side, dtype=np.float32)
    image = np.broadcast_to(ramp[None, :], (side, side)).astype(np.uint8)
    if colour:
        image = np.dstack([image, image[::-1], np.full_like(image, 100)])
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1,
                                               cv2.IMWRITE_JPEG_QUALITY, 90])
    if not ok:
        raise RuntimeError("OpenCV could not encode the JPEG")
    return encoded.tobytes()


def scan_bomb(side: int, scans: int, colour: bool = False, repeat: str = "ac") -> bytes:
    """A progressive JPEG one of whose scans is repeated until it has ``scans`` scans in all:
    its smallest AC scan (``repeat="ac"``) or its first, interleaved DC scan (``"dc"``). The
    markers and segments are well formed; only the work is hostile."""
    jpeg = progressive(side, colour)
    segments = _segments(jpeg)
    sos = [(start, end) for marker, start, end in segments if marker == _SOS]
    # SOS: FF DA, length (2), Ns, Ns x (Cs, Td|Ta), Ss, Se, Ah|Al: an AC scan has Ss > 0
    ac = [(start, end) for start, end in sos if jpeg[start + 5 + 2 * jpeg[start + 4]] > 0]
    start, end = min(ac, key=lambda span: span[1] - span[0]) if repeat == "ac" else sos[0]
    extra = max(0, scans - len(sos))
    eoi = segments[-1][1]
    return jpeg[:eoi] + jpeg[start:end] * extra + jpeg[eoi:]


def main(argv: list[str] | None = None) -> int:
    """Write a crafted image to a file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="kind", required=True)
    bomb = commands.add_parser("scan-bomb", help="a progressive JPEG with many scans")
    bomb.add_argument("--side", type=int, default=6320)
    bomb.add_argument("--scans", type=int, default=15000)
    bomb.add_argument("--colour", action="store_true")
    bomb.add_argument("--repeat", choices=("ac", "dc"), default="ac")
    bomb.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    data = scan_bomb(args.side, args.scans, args.colour, args.repeat)
    args.out.write_bytes(data)
    scans = data.count(b"\xff\xda")
    print(f"{args.out}: {args.side}x{args.side}, {scans} scans, {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

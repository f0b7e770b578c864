"""Is a JPEG whole? Its markers and scans checked without decoding a pixel, and its decoded
tail checked for the grey that libjpeg substitutes for missing data.

libjpeg only *warns* about a truncated or corrupt file (on stderr, which OpenCV neither
captures nor reports): it fills the missing blocks with zeros, mid-grey, and returns an image.
A prediction on that image is a wrong answer, so sagegate looks for the damage itself:

* :func:`check_complete` walks every marker of the file, scan data included, from one vectorised
  pass over its bytes: an EOI must end the data, only legal markers may sit between scans, the
  scans must cover every component (every coefficient, to full precision, for progressive
  files), restart markers must all be there and in order, and each Huffman scan must hold at
  least the bits its declared size needs (every block costs at least its shortest DC and AC
  codes): a 6000x6000 header over 451x300 data cannot. It runs on every JPEG forwarded untouched
  and every progressive one; on the decode path of a baseline file, only when the decode shows
  damage (below), so a large upload pays nothing for it.
* :func:`check_decoded`, after a decode: a baseline file cut short with an EOI appended passes
  every structural test, but its last blocks decode to exactly (128, 128, 128). When a corner
  is that grey, the file is decoded once more with filler before its EOI: a whole file never
  reads it, a cut one does and its corner changes.

Not found: a progressive file cut inside its last refinement scan (every block is there, at a
little less precision), a cut CMYK file (its grey fill becomes another colour), and damage to
the entropy-coded data that neither ends it early nor leaves a marker (libjpeg decodes it as
noise, as the endpoint's decoder would).
"""
from __future__ import annotations

import dataclasses
import math
import struct

import cv2
import numpy as np

from chalicelib.core.errors import InvalidImageError
from chalicelib.core.media import JPEG_EOI
from chalicelib.images.probe import (
    APPN,
    COM,
    CORRUPT,
    DAC,
    DHT,
    DNL,
    DQT,
    DRI,
    EOI,
    MAX_JPEG_MARKERS,
    SOF,
    SOF_PROGRESSIVE,
    SOI,
    SOS,
    STANDALONE,
    TRUNCATED,
    read_segment,
)

_SOF_HUFFMAN_SEQUENTIAL = frozenset({0xC0, 0xC1})
# what may sit between two scans: tables, restart interval, DNL, comments, APPn
_BETWEEN_SCANS = frozenset({DHT, DAC, DQT, DRI, DNL, COM, *APPN})
# copies of a file's own scan data that check_decoded puts before its EOI: enough to reach the
# last block of a file cut after a quarter of its data
_FILLER_COPIES = 3
_GREY = 128


@dataclasses.dataclass
class _Frame:
    marker: int
    width: int
    height: int
    components: dict[int, tuple[int, int]]  # id -> (horizontal, vertical) sampling

    def blocks(self, ids: list[int]) -> int:
        """Blocks in a scan of these components (interleaved if more than one)."""
        hmax = max(h for h, _ in self.components.values())
        vmax = max(v for _, v in self.components.values())
        if len(ids) == 1 or len(self.components) == 1:
            h, v = self.components[ids[0]]
            return (math.ceil(math.ceil(self.width * h / hmax) / 8)
                    * math.ceil(math.ceil(self.height * v / vmax) / 8))
        mcus = math.ceil(self.width / (8 * hmax)) * math.ceil(self.height / (8 * vmax))
        return mcus * sum(h * v for i, (h, v) in self.components.items() if i in ids)

    def mcus(self, ids: list[int]) -> int:
        if len(ids) == 1 or len(self.components) == 1:
            return self.blocks(ids)
        hmax = max(h for h, _ in self.components.values())
        vmax = max(v for _, v in self.components.values())
        return math.ceil(self.width / (8 * hmax)) * math.ceil(self.height / (8 * vmax))


@dataclasses.dataclass
class _State:
    frame: _Frame | None = None
    restart_interval: int = 0
    shortest_code: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    coverage: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    scans: int = 0
    index: _MarkerIndex | None = None


class _MarkerIndex:
    """Where every marker and every restart marker is, from the first scan on: one vectorised
    pass over the file (numpy: faster than a regular expression over megabytes)."""

    def __init__(self, data: bytes, start: int) -> None:
        tail = np.frombuffer(data, np.uint8, offset=start)
        ff = np.flatnonzero(tail[:-1] == 0xFF)
        following = tail[ff + 1]
        restart = (following >= 0xD0) & (following <= 0xD7)
        marker = (following != 0) & ~restart & (following != 0xFF)
        self.markers = ff[marker] + start
        self.restarts = ff[restart] + start
        self.restart_numbers = following[restart] - 0xD0

    def next_marker(self, pos: int) -> int | None:
        found = int(np.searchsorted(self.markers, pos))
        return int(self.markers[found]) if found < len(self.markers) else None

    def restarts_between(self, start: int, end: int) -> np.ndarray:
        """The numbers (0-7) of the restart markers in ``[start, end)``, in order."""
        first, last = np.searchsorted(self.restarts, (start, end))
        return self.restart_numbers[first:last]


def check_complete(data: bytes) -> None:
    """Walk every marker of a probed JPEG; InvalidImageError says truncated or corrupt."""
    state = _State()
    pos = 2
    for _ in range(MAX_JPEG_MARKERS):
        marker, start, end = read_segment(data, pos)
        if marker == EOI:
            _check_coverage(state)
            return
        _header_segment(state, marker, data[start:end])
        pos = end
        if marker == SOS:
            pos = _scan(state, data, start, end)
    raise InvalidImageError(f"{CORRUPT} (more than {MAX_JPEG_MARKERS} markers).")


def _header_segment(state: _State, marker: int, payload: bytes) -> None:
    if marker in SOF:
        if state.frame is not None:
            raise InvalidImageError(f"{CORRUPT} (a second frame header).")
        state.frame = _frame(marker, payload)
    elif marker == DHT:
        _tables(state, payload)
    elif marker == DRI and len(payload) >= 2:
        (state.restart_interval,) = struct.unpack(">H", payload[:2])
    elif marker == SOI or (marker not in STANDALONE and marker != SOS
                           and marker not in _BETWEEN_SCANS):
        raise InvalidImageError(f"{CORRUPT} (an unexpected marker 0xFF{marker:02X}).")


def _frame(marker: int, payload: bytes) -> _Frame:
    if len(payload) < 6:
        raise InvalidImageError(f"{CORRUPT} (a malformed frame header).")
    height, width, count = struct.unpack(">HHB", payload[1:6])
    components = {}
    for index in range(count):
        entry = payload[6 + 3 * index:9 + 3 * index]
        if len(entry) < 3 or not 1 <= entry[1] >> 4 <= 4 or not 1 <= entry[1] & 15 <= 4:
            raise InvalidImageError(f"{CORRUPT} (a malformed frame header).")
        components[entry[0]] = (entry[1] >> 4, entry[1] & 15)
    if not components or width == 0:
        raise InvalidImageError(f"{CORRUPT} (a malformed frame header).")
    return _Frame(marker, width, max(height, 1), components)


def _tables(state: _State, payload: bytes) -> None:
    """Record the shortest code of each Huffman table the segment defines."""
    pos = 0
    while pos + 17 <= len(payload):
        table = (payload[pos] >> 4, payload[pos] & 15)
        counts = payload[pos + 1:pos + 17]
        state.shortest_code[table] = next(
            (length + 1 for length, count in enumerate(counts) if count), 16)
        pos += 17 + sum(counts)


def _scan(state: _State, data: bytes, start: int, end: int) -> int:
    """Check one scan; return where its entropy-coded data ends (at the next marker)."""
    frame = state.frame
    header = data[start:end]
    if frame is None or not header or len(header) < 1 + 2 * header[0] + 3:
        raise InvalidImageError(f"{CORRUPT} (a scan without a valid header).")
    ids = [header[1 + 2 * i] for i in range(header[0])]
    tables = [(header[2 + 2 * i] >> 4, header[2 + 2 * i] & 15) for i in range(header[0])]
    ss, se, approx = header[-3], header[-2], header[-1]
    if any(i not in frame.components for i in ids):
        raise InvalidImageError(f"{CORRUPT} (a scan of a component the frame lacks).")
    if state.index is None:
        state.index = _MarkerIndex(data, end)
    found = state.index.next_marker(end)
    if found is None:
        raise InvalidImageError(f"{TRUNCATED} (its data ends inside a scan).")
    _check_restarts(state, state.index.restarts_between(end, found), ids)
    bits = 8 * (found - end)
    if bits < _minimum_bits(state, frame, ids, tables, (ss, approx >> 4)):
        raise InvalidImageError(
            f"{TRUNCATED} (a scan holds {bits // 8} bytes, too few for a "
            f"{frame.width}x{frame.height} image).")
    for component in ids:
        cover = state.coverage.setdefault(component, [99] * 64)
        for k in range(min(ss, 63), min(se, 63) + 1):
            cover[k] = min(cover[k], approx & 15)
    state.scans += 1
    return found


def _minimum_bits(state: _State, frame: _Frame, ids: list[int],
                  tables: list[tuple[int, int]], progression: tuple[int, int]) -> int:
    """The fewest bits a scan can hold: each block needs its shortest DC code (and, in a
    sequential file, its shortest AC code). 0 where no such bound holds."""
    start, refining = progression
    sequential = frame.marker in _SOF_HUFFMAN_SEQUENTIAL
    if not sequential and (frame.marker not in SOF_PROGRESSIVE or start != 0 or refining):
        return 0  # AC scans may skip whole bands of blocks with one EOB run
    bits = 0
    for component, (dc, ac) in zip(ids, tables, strict=True):
        per_block = state.shortest_code.get((0, dc), 1)
        if sequential:
            per_block += state.shortest_code.get((1, ac), 1)
        # the component's own block count: never more than an interleaved scan codes
        bits += frame.blocks([component]) * per_block
    return bits


def _check_restarts(state: _State, numbers: np.ndarray, ids: list[int]) -> None:
    interval = state.restart_interval
    if not interval or state.frame is None:
        return
    expected = math.ceil(state.frame.mcus(ids) / interval) - 1
    if (numbers != np.arange(len(numbers)) % 8).any():
        raise InvalidImageError(f"{CORRUPT} (restart markers out of order).")
    if len(numbers) < expected:
        raise InvalidImageError(
            f"{TRUNCATED} ({len(numbers)} of its {expected} restart markers are there).")


def _check_coverage(state: _State) -> None:
    frame = state.frame
    if frame is None or not state.scans:
        raise InvalidImageError(f"{TRUNCATED} (it has no image data).")
    for component in frame.components:
        cover = state.coverage.get(component)
        if cover is None:
            raise InvalidImageError(f"{TRUNCATED} (a scan is missing).")
        if frame.marker in SOF_PROGRESSIVE and max(cover) != 0:
            raise InvalidImageError(f"{TRUNCATED} (progressive scans are missing).")


def check_decoded(data: bytes, image: np.ndarray, reduction: int) -> None:
    """Refuse (InvalidImageError) a JPEG whose decoder ran out of data: its last blocks
    came out mid-grey in ``image``, decoded at ``reduction``."""
    grey = [corner for corner in _corners(image) if (image[corner] == _GREY).all()]
    if not grey:
        return  # the common case: no second decode, no marker walk
    check_complete(data)  # a marker inside the data, restarts or scan data missing: say which
    padded = _padded(data)
    flags = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
             8: cv2.IMREAD_REDUCED_COLOR_8}
    again = cv2.imdecode(np.frombuffer(padded, np.uint8), flags.get(reduction, cv2.IMREAD_COLOR))
    if again is None or again.shape != image.shape or any(
            (again[corner] != image[corner]).any() for corner in grey):
        raise InvalidImageError(f"{TRUNCATED} (its data ends before the image does).")


def _padded(data: bytes) -> bytes:
    """The file with copies of its last scan's data before the EOI, as filler: a whole file
    never reads them; a cut one decodes them (as noise) into the blocks it lacked."""
    eoi = data.rfind(JPEG_EOI)
    sos = data.rfind(b"\xff\xda", 0, eoi)
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    head = data[:eoi - 1] if data[eoi - 1] == 0xFF else data[:eoi]  # no marker across the seam
    return b"".join((head, data[start:eoi] * _FILLER_COPIES, data[eoi:]))


def _corners(image: np.ndarray) -> list[tuple[int, int]]:
    rows, cols = image.shape[:2]
    return [(0, 0), (0, cols - 1), (rows - 1, 0), (rows - 1, cols - 1)]

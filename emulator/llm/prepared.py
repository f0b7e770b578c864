"""The model prepared once and kept on disk: vocabulary, laid-out weights, onnxruntime's step.

Preparing the model from its GGUF file costs ~12 s a process: parsing the file's metadata
(its 49,152 tokens and merges, ~5 s), dequantizing and laying out the weights (~3 s,
``weights.py``), writing the 8-bit step graph (~3 s, ``onnxstep.py``). The first load writes
the results to a cache entry; every later load memory-maps the arrays (``np.load(mmap_mode=
"r")``: the pages are the page cache's, shared by every process that maps them) and reads the
step graph's bytes, in ~1-2 s. What the model computes is unchanged: the same float32 arrays
bit for bit, the same serialized graph.

An entry is a directory named for the model file (its name, size, modification time and a
hash of its first MiB) and for the code that prepares it (these modules' source and the
versions of gguf and numpy): another wheel or a change to the code makes another entry, and
the older entries of that file are removed. A step graph's file is named for its bits and its
own code (``onnxstep.py``, onnx's version), added to the entry when first asked for. Entries
are written under an exclusive ``flock`` into a temporary name renamed into place, so
processes loading at once build it once and none reads half an entry. The manifest gives each
file's size and CRC-32, checked on every load (~0.3 s): an entry that does not match is
removed and built again, never trusted. A cache that cannot be written (a read-only or full
disk) is said in the log and the model prepared in memory, as without a cache.

Where: ``build/llm-cache`` in the checkout, or ``EMULATOR_LLM_CACHE`` (``off``: no cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import mmap
import os
import re
import shutil
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from emulator.llm import weights
from emulator.llm.modelfile import Hyperparameters, ModelFile, Vocabulary
from emulator.llm.weights import Block, Weights

LOG = logging.getLogger("emulator")
ENV_CACHE = "EMULATOR_LLM_CACHE"
OFF = "off"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "build" / "llm-cache"
FORMAT = 1
"""The entry's layout; raise it when the files an entry holds change."""
MANIFEST = "manifest.json"
VOCABULARY = "vocabulary.json"
SHAPE = "shape.json"
HEAD_BYTES = 1 << 20
"""How much of the model file is hashed for its identity (its header: metadata, vocabulary)."""
_HERE = Path(__file__).resolve().parent
_BLOCK_PARTS = tuple(field.name for field in dataclasses.fields(Block))


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The model ready to run: its vocabulary, weights and (if asked for) its step graph."""

    vocabulary: Vocabulary
    weights: Weights
    step: bytes | None


class Unusable(Exception):
    """A cache entry that is missing a part or does not match its manifest."""


def cache_root(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The cache's directory: ``EMULATOR_LLM_CACHE``, else ``DEFAULT_ROOT``; None if ``off``."""
    value = environ.get(ENV_CACHE, "")
    if value == OFF:
        return None
    return Path(value) if value else DEFAULT_ROOT


def prepare(path: Path, bits: int | None, root: Path | None) -> Prepared:
    """The model in ``path``, prepared, with its ``bits``-bit step graph (None: no graph),
    through the cache under ``root`` (None: prepared in memory).

    Raises:
        ModelFileError: the file is missing or not a model the engine runs.
    """
    if root is None:
        return _fresh(path, bits)
    try:
        entry = _Entry(root, path)
    except OSError:
        return _fresh(path, bits)  # the file cannot be read: ModelFile says so by name
    try:
        return entry.read(bits)
    except (Unusable, OSError):
        pass
    try:
        with entry.locked():
            return entry.build(bits)
    except OSError as error:
        LOG.warning("llm: the model's cache under %s cannot be written (%s): the model "
                    "is prepared in memory", root, error)
        return _fresh(path, bits)


def _fresh(path: Path, bits: int | None) -> Prepared:
    file = ModelFile(path)
    laid_out = weights.load(file)
    return Prepared(file.vocabulary(), laid_out, _step(laid_out, bits))


def _step(laid_out: Weights, bits: int | None) -> bytes | None:
    if bits is None:
        return None
    from emulator.llm import onnxstep

    return onnxstep.build(laid_out, bits)


def _fingerprint(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _source(*modules: str) -> str:
    return "".join((_HERE / module).read_text() for module in modules)


def _versions(*distributions: str) -> str:
    return " ".join(f"{d}=={importlib.metadata.version(d)}" for d in distributions)


def _file_identity(path: Path) -> str:
    status = path.stat()
    with open(path, "rb") as file:
        head = hashlib.sha256(file.read(HEAD_BYTES)).hexdigest()
    return f"{path.name} {status.st_size} {status.st_mtime_ns} {head}"


def step_name(bits: int) -> str:
    """The file of a step graph in ``bits`` bits, named for the code that writes it."""
    code = _fingerprint(_source("onnxstep.py"), _versions("onnx"), str(bits))
    return f"step-{bits}bit-{code}.onnx"


def _checksum(path: Path) -> tuple[int, int]:
    """(size, CRC-32) of a file, read through a memory map."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return 0, zlib.crc32(b"")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return size, zlib.crc32(mapped)


class _Entry:
    """One model file's entry under the cache's root."""

    def __init__(self, root: Path, path: Path) -> None:
        self.root, self.path = root, path
        code = _fingerprint(_source("modelfile.py", "weights.py", "prepared.py"),
                            _versions("gguf", "numpy"), str(FORMAT))
        self.directory = root / f"{path.stem}-{_fingerprint(_file_identity(path), code)}"
        # this file's entries, whatever their key, and writers' temporary directories
        self._siblings = re.compile(rf"\.?{re.escape(path.stem)}-[0-9a-f]{{16}}(\.\d+)?")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The root's exclusive lock: one process at a time writes or removes entries."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self, bits: int | None) -> Prepared:
        """The entry's model, every file checked against the manifest.

        Raises:
            Unusable: the entry, or the step graph asked for, is missing or does not match.
        """
        vocabulary, laid_out, files = self._model()
        step = None if bits is None else self._checked(files, step_name(bits)).read_bytes()
        return Prepared(vocabulary, laid_out, step)

    def build(self, bits: int | None) -> Prepared:
        """Under the lock: the entry read if another process has just written it, else
        written (a damaged one removed first), or only its step graph added."""
        try:
            return self.read(bits)
        except Unusable as why:
            damage = why
        try:
            vocabulary, laid_out, files = self._model()
        except Unusable:
            self._unusable(damage)
            self._remove_all()
            file = ModelFile(self.path)
            vocabulary, laid_out = file.vocabulary(), weights.load(file)
            written = self._saved(lambda: self._write(vocabulary, laid_out))
        else:
            written = True
            if bits is not None and step_name(bits) in files:
                self._unusable(damage)
        step = _step(laid_out, bits)
        if written and bits is not None and step is not None:
            self._saved(lambda: self._add(step_name(bits), step))
        return Prepared(vocabulary, laid_out, step)

    def _unusable(self, why: Unusable) -> None:
        if self.directory.exists():
            LOG.warning("llm: the model's cache %s is unusable (%s): preparing it again",
                        self.directory, why)

    def _saved(self, write: Callable[[], None]) -> bool:
        """Whether ``write`` could write (a full disk is said, the model served anyway)."""
        try:
            write()
        except (OSError, Unusable) as error:
            LOG.warning("llm: the model's cache under %s cannot be written (%s): the model "
                        "is prepared in memory", self.root, error)
            return False
        return True

    def _model(self) -> tuple[Vocabulary, Weights, dict[str, Any]]:
        files: dict[str, Any] = self._manifest()["files"]
        try:
            vocabulary = Vocabulary(**self._document(files, VOCABULARY))
            shape = Hyperparameters(**self._document(files, SHAPE))
        except TypeError as e:  # fields another version of the code wrote
            raise Unusable(f"its vocabulary or shape is not this code's: {e}") from e
        return vocabulary, self._weights(shape, files), files

    def _manifest(self) -> dict[str, Any]:
        try:
            manifest = json.loads((self.directory / MANIFEST).read_text())
        except FileNotFoundError as e:
            raise Unusable("no manifest") from e
        except (OSError, ValueError) as e:
            raise Unusable(f"its manifest does not read: {e}") from e
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT \
                or not isinstance(manifest.get("files"), dict):
            raise Unusable("its manifest is not this code's")
        return manifest

    def _checked(self, files: Mapping[str, Any], name: str) -> Path:
        if name not in files:
            raise Unusable(f"no {name}")
        path = self.directory / name
        try:
            found = _checksum(path)
        except OSError as e:
            raise Unusable(f"{name} does not read: {e}") from e
        if list(found) != files[name]:
            raise Unusable(f"{name} does not match its manifest")
        return path

    def _document(self, files: Mapping[str, Any], name: str) -> dict[str, Any]:
        """A JSON file's object, its fields checked by the dataclass it is given to."""
        try:
            document = json.loads(self._checked(files, name).read_text())
        except (OSError, ValueError) as e:
            raise Unusable(f"{name} does not read: {e}") from e
        if not isinstance(document, dict):
            raise Unusable(f"{name} is not an object")
        return document

    def _array(self, files: Mapping[str, Any], name: str) -> np.ndarray:
        path = self._checked(files, f"{name}.npy")
        try:
            # a plain ndarray over the file's map: np.memmap's subclass costs every slice
            return np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
        except ValueError as e:
            raise Unusable(f"{name}.npy does not load: {e}") from e

    def _weights(self, shape: Hyperparameters, files: Mapping[str, Any]) -> Weights:
        embeddings = self._array(files, "embeddings")
        return Weights(
            shape=shape, embeddings=embeddings,
            head=self._array(files, "head") if "head.npy" in files else embeddings,
            output_norm=self._array(files, "output_norm"),
            blocks=tuple(Block(**{part: self._array(files, f"blk{index}.{part}")
                                  for part in _BLOCK_PARTS})
                         for index in range(shape.blocks)))

    def _write(self, vocabulary: Vocabulary, laid_out: Weights) -> None:
        """The entry written in a temporary directory, then renamed into place."""
        temporary = self.root / f".{self.directory.name}.{os.getpid()}"
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir(parents=True)
        try:
            arrays = {"embeddings": laid_out.embeddings, "output_norm": laid_out.output_norm}
            if laid_out.head is not laid_out.embeddings:
                arrays["head"] = laid_out.head
            for index, block in enumerate(laid_out.blocks):
                arrays.update({f"blk{index}.{part}": getattr(block, part)
                               for part in _BLOCK_PARTS})
            for name, array in arrays.items():
                np.save(temporary / f"{name}.npy", array, allow_pickle=False)
            (temporary / VOCABULARY).write_text(json.dumps(dataclasses.asdict(vocabulary)))
            (temporary / SHAPE).write_text(json.dumps(dataclasses.asdict(laid_out.shape)))
            files = {p.name: list(_checksum(p)) for p in temporary.iterdir()}
            manifest = {"format": FORMAT, "model": self.path.name, "files": files}
            (temporary / MANIFEST).write_text(json.dumps(manifest, indent=1))
            temporary.rename(self.directory)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise

    def _add(self, name: str, data: bytes) -> None:
        """A step graph added to the entry: its file, then the manifest that lists it (each
        written aside and renamed), other step graphs in as many bits removed."""
        manifest = self._manifest()
        bits_prefix = name.rsplit("-", 1)[0] + "-"
        stale = [n for n in manifest["files"] if n.startswith(bits_prefix) and n != name]
        self._replace(self.directory / name, data)
        files = {n: v for n, v in manifest["files"].items() if n not in stale}
        files[name] = list(_checksum(self.directory / name))
        self._replace(self.directory / MANIFEST,
                      json.dumps({**manifest, "files": files}, indent=1).encode())
        for old in stale:
            (self.directory / old).unlink(missing_ok=True)

    @staticmethod
    def _replace(path: Path, data: bytes) -> None:
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            temporary.write_bytes(data)
            temporary.replace(path)
        finally:
            temporary.unlink(missing_ok=True)

    def _remove_all(self) -> None:
        """This entry and the file's other entries (another wheel's, older code's) removed,
        and the temporary directories of writers that died: under the lock, nobody writes."""
        for child in self.root.iterdir():
            if self._siblings.fullmatch(child.name):
                shutil.rmtree(child, ignore_errors=True)

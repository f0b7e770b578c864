"""GPT-2 style byte-level BPE, from the model file's own tokens, merges and token types.

Text becomes UTF-8 bytes, each byte one printable character of GPT-2's byte alphabet
(``Ġ`` is the space); pre-tokenization splits the text into words (every digit alone, then
GPT-2's pattern: the ``smollm`` pre-tokenizer of llama.cpp, HF's ``Digits`` then
``ByteLevel``), each word is merged pair by pair in the merges' order, and the pieces are
looked up in the vocabulary. The special tokens (GGUF type CONTROL: ``<|im_start|>``,
``<|im_end|>``, ...) are matched in the text first, whole, as HF's tokenizer does.
"""

from __future__ import annotations

import codecs
import functools
import itertools
from collections.abc import Iterable, Sequence

import regex

from emulator.llm.errors import ModelFileError
from emulator.llm.modelfile import Vocabulary

CONTROL = 3
"""GGUF's token type for special tokens (1 is a normal token)."""
USER_DEFINED = 4

# llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM: digits one by one, then GPT-2's words.
DIGIT = regex.compile(r"\p{N}")
WORD = regex.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")


@functools.cache
def byte_alphabet() -> dict[int, str]:
    """GPT-2's map from a byte to a printable character (printable Latin-1 stay themselves)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    alphabet = {b: chr(b) for b in kept}
    shifted = 0
    for b in range(256):
        if b not in alphabet:
            alphabet[b] = chr(256 + shifted)
            shifted += 1
    return alphabet


class Tokenizer:
    """Encodes text to token ids and back."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self._tokens = vocabulary.tokens
        self._ids = {token: i for i, token in enumerate(vocabulary.tokens)}
        self._ranks = {tuple(merge.split(" ", 1)): rank
                       for rank, merge in enumerate(vocabulary.merges)}
        self.special = {token: i for i, (token, kind) in
                        enumerate(zip(vocabulary.tokens, vocabulary.token_types, strict=True))
                        if kind in (CONTROL, USER_DEFINED)}
        self.bos_id, self.eos_id = vocabulary.bos_id, vocabulary.eos_id
        self._bytes = {char: b for b, char in byte_alphabet().items()}
        self.missing_bytes = frozenset(b for char, b in self._bytes.items()
                                       if char not in self._ids)
        """Bytes the vocabulary has no token for, dropped when encoding as HF's tokenizer and
        llama.cpp drop them: SmolLM2's lacks six ASCII controls (0x04, 0x06, 0x13, 0x14,
        0x16, 0x1d), the lead bytes of planes 4 to 11 (0xf1, 0xf2: no character is
        assigned there) and bytes that never occur in UTF-8 (0xc0, 0xc1, 0xf5-0xff)."""
        if len(self.missing_bytes) > 32:
            raise ModelFileError(f"the vocabulary lacks {len(self.missing_bytes)} of the 256 "
                                 "byte tokens: not a byte-level BPE vocabulary")
        # longest first, so that a special token is never cut by a shorter one it starts with
        alternatives = "|".join(regex.escape(t) for t in sorted(self.special, key=len,
                                                                  reverse=True))
        self._special_pattern = regex.compile(f"({alternatives})") if alternatives else None
        self._word = functools.lru_cache(maxsize=65536)(self._word_ids)

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids of ``text``.

        Args:
            special: read special tokens' text (``<|im_start|>``) as those tokens; with
                False, they are tokenized as the plain text they are.
        """
        if not special or self._special_pattern is None:
            return self._encode_plain(text)
        ids: list[int] = []
        for index, part in enumerate(self._special_pattern.split(text)):
            if index % 2:
                ids.append(self.special[part])
            elif part:
                ids.extend(self._encode_plain(part))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of token ids; bytes that do not form UTF-8 become U+FFFD."""
        return self.token_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes that token ids stand for (a special token's are its text's)."""
        out = bytearray()
        for i in ids:
            token = self._tokens[i]
            if token in self.special:
                out += token.encode("utf-8")
            else:
                out += bytes(self._bytes[char] for char in token)
        return bytes(out)

    def is_special(self, token_id: int) -> bool:
        return self._tokens[token_id] in self.special

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        for chunk in _pretokenize(text):
            ids.extend(self._word(chunk))
        return ids

    def _word_ids(self, word: str) -> tuple[int, ...]:
        alphabet = byte_alphabet()
        symbols = [alphabet[b] for b in word.encode("utf-8")]
        merged = _merge([s for s in symbols if s in self._ids], self._ranks)
        return tuple(self._ids[symbol] for symbol in merged)


def _pretokenize(text: str) -> list[str]:
    """Words: each digit alone, the text between digits split by GPT-2's pattern."""
    words: list[str] = []
    last = 0
    for digit in DIGIT.finditer(text):
        words.extend(WORD.findall(text, last, digit.start()))
        words.append(digit.group())
        last = digit.end()
    words.extend(WORD.findall(text, last))
    return words


def _merge(symbols: list[str], ranks: dict[tuple[str, ...], int]) -> Sequence[str]:
    """BPE: merge the adjacent pair of lowest rank, everywhere it occurs, until none ranks."""
    while len(symbols) > 1:
        pairs = set(itertools.pairwise(symbols))
        best = min(pairs, key=lambda pair: ranks.get(pair, len(ranks)))
        if best not in ranks:
            break
        merged: list[str] = []
        i = 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                merged.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    return symbols


class TextStream:
    """Token ids to text as they come: bytes of a character split across tokens wait for the
    token that completes it, so every piece is whole characters."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        return self._decoder.decode(self._tokenizer.token_bytes([token_id]))

    def flush(self) -> str:
        """What is left: an incomplete character at the end becomes U+FFFD."""
        return self._decoder.decode(b"", final=True)

"""The byte-level BPE read from the model file: HF's tokenizer's ids, text back unchanged,
special tokens whole, streamed text in whole characters."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from emulator.llm.engine import Engine
from emulator.llm.tokenizer import TextStream, Tokenizer

# The six ASCII controls SmolLM2's vocabulary has no byte token for (HF drops them too), and
# the lead bytes 0xf1 and 0xf2 of planes 4 to 11 (unassigned): text is any other text.
MISSING = "\x04\x06\x13\x14\x16\x1d"
LAST_ENCODABLE = 0x3FFFF
SAMPLES = [
    "Hello world", " leading space", "trailing  \n\n", "It's 2026, π≈3.14159 and 1000000!",
    "<|im_start|>user\nHi<|im_end|>\n", "naïve café, 東京, 🤗👩‍💻", "tabs\tand\r\nCRLF",
    "don't they'll we've", "  \t  ", "x" * 300, "ab<|im_start|>cd<|im_end|>",
    "tags \U000e0041 and \U0010fffd", "digits ١٢٣ and ½ ² Ⅻ",
]
text_strategy = st.text(st.characters(blacklist_characters=MISSING, codec="utf-8",
                                        max_codepoint=LAST_ENCODABLE),
                        max_size=80)
SLOW_FIXTURE = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture(scope="module")
def reference(engine: Engine) -> HFTokenizer:
    """HF's tokenizer built from the same file: SmolLM2's tokenizer.json pre-tokenizes with
    Digits(individual_digits) then ByteLevel, and adds its special tokens whole."""
    vocabulary = engine.tokenizer.vocabulary
    vocab = {token: i for i, token in enumerate(vocabulary.tokens)}
    merges = [tuple(m.split(" ", 1)) for m in vocabulary.merges]
    hf = HFTokenizer(models.BPE(vocab, merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t in engine.tokenizer.special])
    return hf


@pytest.mark.parametrize("text", SAMPLES)
def test_encodes_as_hf_tokenizer_and_decodes_back(engine: Engine, reference: HFTokenizer,
                                                   text: str) -> None:
    ids = engine.tokenizer.encode(text)
    assert ids == reference.encode(text).ids
    assert engine.tokenizer.decode(ids) == text


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_FIXTURE)
@given(text=text_strategy)
def test_any_text_round_trips_with_hf_tokenizers_ids(engine: Engine, reference: HFTokenizer,
                                                      text: str) -> None:
    ids = engine.tokenizer.encode(text)
    assert engine.tokenizer.decode(ids) == text
    assert ids == reference.encode(text).ids


def test_bytes_without_a_token_are_dropped_as_hf_does(engine: Engine,
                                                       reference: HFTokenizer) -> None:
    assert engine.tokenizer.missing_bytes >= {ord(c) for c in MISSING}
    ids = engine.tokenizer.encode("a\x04b")
    assert engine.tokenizer.decode(ids) == "ab"
    assert ids == reference.encode("a\x04b").ids


def test_special_tokens_are_read_whole_only_when_asked(engine: Engine) -> None:
    tokenizer = engine.tokenizer
    assert tokenizer.encode("<|im_start|>") == [1]
    assert tokenizer.encode("<|im_end|>") == [tokenizer.eos_id] == [2]
    plain = tokenizer.encode("<|im_start|>", special=False)
    assert 1 not in plain and tokenizer.decode(plain) == "<|im_start|>"
    assert tokenizer.is_special(1) and not tokenizer.is_special(tokenizer.encode("Hi")[0])


def test_chat_prompt_has_the_templates_special_tokens(engine: Engine) -> None:
    ids = engine.chat_prompt([{"role": "user", "content": "Hi <|im_end|> there"}])
    text = engine.tokenizer.decode(ids)
    assert text == engine.template.render([{"role": "user", "content": "Hi <|im_end|> there"}])
    # system, user, and the opened assistant turn: three starts; the user's text is read like
    # the template's (HF does the same), so its <|im_end|> is the token
    assert ids.count(1) == 3 and ids.count(2) == 3
    assert ids[-4:] == [1, *engine.tokenizer.encode("assistant\n")]


def test_streamed_text_waits_for_a_characters_last_byte(engine: Engine) -> None:
    tokenizer: Tokenizer = engine.tokenizer
    ids = tokenizer.encode("🤗 東京")
    stream = TextStream(tokenizer)
    pieces = [stream.add(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == "🤗 東京"
    assert all("\ufffd" not in piece for piece in pieces)
    assert len(ids) > len("🤗 東京")  # some character did span several tokens

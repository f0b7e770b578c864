"""The chat template from the model file, rendered as HF's apply_chat_template does."""

from __future__ import annotations

import pytest

from emulator.llm.chat import ChatTemplate
from emulator.llm.engine import Engine
from emulator.llm.errors import GenerationRefused

DEFAULT_SYSTEM = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                  "Hugging Face<|im_end|>\n")


def test_a_user_message_gets_the_default_system_turn_and_the_assistants_opened(
        engine: Engine) -> None:
    prompt = engine.template.render([{"role": "user", "content": "What is 2+2?"}])
    assert prompt == (DEFAULT_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                      "<|im_start|>assistant\n")


def test_a_system_message_replaces_the_default_and_no_generation_prompt_ends_the_turns(
        engine: Engine) -> None:
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    prompt = engine.template.render(messages, add_generation_prompt=False)
    assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>"
                      "\n<|im_start|>assistant\nHello<|im_end|>\n")


@pytest.mark.parametrize("messages", [
    [], "Hi", [{"role": "user"}], [{"role": "tool", "content": "x"}],
    [{"role": "user", "content": ["parts"]}], ["Hi"],
])
def test_refuses_messages_that_are_not_roles_and_texts(engine: Engine, messages: object) -> None:
    with pytest.raises(GenerationRefused) as refused:
        engine.template.render(messages)  # type: ignore[arg-type]
    assert refused.value.param == "messages"


def test_a_template_raising_is_a_refusal_and_the_sandbox_holds() -> None:
    template = ChatTemplate("{{ raise_exception('only one message') }}", "<s>", "</s>")
    with pytest.raises(GenerationRefused, match="only one message"):
        template.render([{"role": "user", "content": "x"}])
    sandboxed = ChatTemplate("{{ messages.__class__.__mro__ }}", "<s>", "</s>")
    with pytest.raises(Exception, match=r"unsafe|access"):
        sandboxed.render([{"role": "user", "content": "x"}])

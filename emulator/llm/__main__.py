"""``python -m emulator.llm``: answer a prompt, streamed to stdout, and say how fast.

    .venv/bin/python -m emulator.llm --prompt "What is the capital of France?" \\
        --max-new-tokens 64

The answer is printed as it is generated; then one line on stderr gives the prompt's tokens,
the time to first token (the prompt's pass), the generated tokens and the decoding rate in
tokens/s (the steps after the first token), the median over ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from emulator.llm.engine import BACKENDS, ONNXRUNTIME, Engine
from emulator.llm.generation import Generation
from emulator.llm.sampling import Sampling


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m emulator.llm",
        description="Answer a prompt with the emulator's language model (SmolLM2-135M-"
        "Instruct) and print the decoding speed.")
    parser.add_argument("--prompt", default="What is the capital of France?",
                        help="the user's message (default: %(default)s)")
    parser.add_argument("--raw", action="store_true",
                        help="send the prompt as it is, without the chat template")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[], help="a stop string (repeat)")
    parser.add_argument("--runs", type=int, default=1,
                        help="generate this many times; the figures are the medians")
    parser.add_argument("--backend", choices=BACKENDS, default=ONNXRUNTIME,
                        help="how one-token steps run (default: %(default)s)")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="numpy's BLAS threads (default: the engine's, 1)")
    return parser


def _timed(generation: Generation, echo: bool) -> tuple[float, float]:
    """Runs a generation; returns (time to first token, decoding tokens/s after it)."""
    start = time.perf_counter()
    first = 0.0
    for index, piece in enumerate(generation):
        if index == 0:
            first = time.perf_counter()
        if echo:
            sys.stdout.write(piece.text)
            sys.stdout.flush()
    end = time.perf_counter()
    steps = len(generation.token_ids) - 1
    return first - start, steps / (end - first) if steps and end > first else 0.0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    began = time.perf_counter()
    engine = (Engine.load(backend=args.backend) if args.blas_threads is None
              else Engine.load(backend=args.backend, blas_threads=args.blas_threads))
    loaded = time.perf_counter() - began
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                        stop=tuple(args.stop))
    prompt = (engine.tokenizer.encode(args.prompt) if args.raw else
              engine.chat_prompt([{"role": "user", "content": args.prompt}]))
    firsts, rates = [], []
    for run in range(args.runs):
        generation = engine.generate(prompt, sampling)
        first, rate = _timed(generation, echo=run == 0)
        firsts.append(first)
        rates.append(rate)
        if run == 0:
            print(flush=True)
    print(f"loaded in {loaded:.1f} s; prompt {len(prompt)} tokens, first token "
          f"{statistics.median(firsts) * 1000:.0f} ms; {len(generation.token_ids)} tokens "
          f"({generation.finish_reason}); {statistics.median(rates):.1f} tokens/s "
          f"(median of {args.runs})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

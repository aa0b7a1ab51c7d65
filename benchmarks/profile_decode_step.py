"""Where a decode step's time goes: greedy decode steps of the shipped base at N rows after a shared prompt.

    python benchmarks/profile_decode_step.py --rows 8 --dtype float32

Each repeat opens a session, prefills the rows' prompts (a ``--context``-token prompt whose rows share all but
the last ``--own`` tokens, as retail's system prompt and tools; evaluation's later turns hold 1,000-2,000 own), then times ``--tokens`` greedy steps of the next turn
(the engine's own decode clock); the last repeat runs under cProfile, whose top entries (by own time) show the
kernels: the decode linears (``_linear_pointwise`` / ``linear``) and the attention kernel (``decode_attention``).
Only meaningful on a quiet machine; it prints the CPU.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from trace_train.engine import engine_for
from trace_train.metrics import cpu_name
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="retail-v2-smollm2-135m")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--context", type=int, default=3400)
    p.add_argument("--own", type=int, default=50, help="tokens of each row's own after the shared part")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()

    policy = HFPolicy.from_pretrained(args.model, dtype=args.dtype)
    engine = engine_for(policy)
    vocab = policy.model.config.vocab_size
    g = torch.Generator().manual_seed(args.rows)
    shared = torch.randint(100, vocab, (args.context - args.own,), generator=g).tolist()
    prompts = [
        shared + torch.randint(100, vocab, (args.own,), generator=g).tolist() for _ in range(args.rows)
    ]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.tokens, min_new_tokens=args.tokens)
    print(f"{cpu_name()}, {policy.model.dtype}, {torch.get_num_threads()} threads, {args.rows} rows")
    profiler = cProfile.Profile()
    for repeat in range(args.repeats):
        session = engine.session(sampling)
        first, _ = session(prompts, list(range(args.rows)), 0)
        follow = [p + o + [shared[0]] for p, o in zip(prompts, first, strict=True)]
        before = engine.stats.decode_seconds
        last = repeat == args.repeats - 1
        if last:
            profiler.enable()
        session(follow, list(range(args.rows)), 1)
        if last:
            profiler.disable()
        ms = 1e3 * (engine.stats.decode_seconds - before) / (args.tokens - 1)
        print(f"repeat {repeat}: {ms:.1f} ms a step{' (under cProfile)' if last else ''}", flush=True)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()

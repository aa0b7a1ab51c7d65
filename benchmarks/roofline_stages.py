"""The roofline account of full-size demo stages (issue 50): where each phase stands against this machine.

    python benchmarks/roofline_stages.py                       # 32 test tasks + 2 GRPO steps (~25 min, 2 cores)
    python benchmarks/roofline_stages.py --sides eval --eval-episodes 8 --eval-batch 8
    python benchmarks/roofline_stages.py --sides decode --label decode   # decode alone: batch x dtype x threads
    python benchmarks/roofline_stages.py --sides linears --label linears # routed decode linears vs default, paired

Two stages of the demo at their real sizes, each in its own subprocess, one after the other:

1. ``eval``: the shipped base (``retail-v2-smollm2-135m``) on ``--eval-episodes`` retail-v2 test tasks at the
   demo's caps (fitted to the oracle: 12 turns, 192 tokens) and batch size, ``--dtype auto``;
2. ``train``: one adapter's GRPO steps from the shipped base on ``trace/retail-policy-adherence-v0`` at the
   demo's ``[adapters]`` sizes (groups of 4, 2 groups a step, 12 turns, 192 tokens, LoRA r16).

3. ``decode`` (on request): decode alone after a 3,400-token prompt at batch 1, 8 and 32, in bf16 and float32,
   with 1 thread and with all: tokens/s and share of bound.
4. ``linears`` (on request): the decode steps' routed bf16 linears against torch's default kernels, paired and
   repeated at batch 1, 2, 4, 8 and 32, with whether both picked the same greedy tokens.

Each prints and records the account of ``trace_train/roofline.py``: per phase (prefill, decode, train, other)
tokens, GFLOP, GB, seconds, the lower bound at the measured peak and the share of bound. The figures only mean
something on a quiet machine: the script records the load average and the CPU (``lscpu``'s model name and its
bf16 flags) beside them, and the measured peaks (a busy machine lowers the peak and the time alike).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trace_train.metrics import cpu_name

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "roofline"


def side_eval(episodes: int, batch: int, model: str) -> dict[str, Any]:
    from trace_train.config import EvalSettings
    from trace_train.evaluate import evaluate
    from trace_train.policy_factory import make_policy

    policy = make_policy(model, dtype="auto")
    t0 = time.perf_counter()
    res = evaluate(policy, "trace/retail-v2", EvalSettings(episodes=episodes, batch_size=batch), split="test")
    return {
        "stage": f"evaluation of {model} on {episodes} retail-v2 test tasks (batch {batch})",
        "seconds": time.perf_counter() - t0,
        "success_rate": res.success_rate,
        "generated_tokens": sum(r["generated_tokens"] for r in res.trajectories),
        "roofline": res.roofline,
    }


def side_train(steps: int, model: str, env_id: str) -> dict[str, Any]:
    from trace_train.config import GRPOArgs
    from trace_train.grpo.trainer import train

    with tempfile.TemporaryDirectory() as out:
        args = GRPOArgs(
            env_id=env_id,
            model=model,
            out=out,
            dtype="auto",
            steps=steps,
            groups_per_step=2,
            group_size=4,
            max_new_tokens=192,
            max_turns=12,
            micro_batch_size=4,
            save_every=0,
            tensorboard=False,
            progress=False,
        )
        t0 = time.perf_counter()
        result = train(args)
    return {
        "stage": f"GRPO on {env_id} from {model}: {steps} steps of 2 groups x 4 rollouts",
        "seconds": time.perf_counter() - t0,
        "roofline": result["roofline"],
    }


def side_decode(
    model: str, context: int, tokens: int, batches: list[int], dtypes: list[str]
) -> dict[str, Any]:
    """Decode alone, at each batch size, dtype and thread count: ``tokens`` greedy steps after a ``context``-token
    prompt (random ids; all rows share all but the last 50 tokens, as retail's system prompt and tools)."""
    import torch

    from trace_train.engine import engine_for
    from trace_train.policies.base import SamplingConfig
    from trace_train.policies.hf import HFPolicy
    from trace_train.roofline import LEDGER, account

    rows_out = []
    threads_max = torch.get_num_threads()
    for dtype in dtypes:
        policy = HFPolicy.from_pretrained(model, dtype=dtype)
        vocab = policy.model.config.vocab_size
        for batch in batches:
            g = torch.Generator().manual_seed(batch)
            shared = torch.randint(100, vocab, (context - 50,), generator=g).tolist()
            prompts = [shared + torch.randint(100, vocab, (50,), generator=g).tolist() for _ in range(batch)]
            for threads in sorted({1, threads_max}):
                torch.set_num_threads(threads)
                engine = engine_for(policy)
                engine.clear()
                sampling = SamplingConfig(temperature=0.0, max_new_tokens=tokens, min_new_tokens=tokens)
                session = engine.session(sampling)
                out, _ = session(prompts, list(range(batch)), 0)  # prefill, not timed below
                follow = [p + o + [shared[0]] for p, o in zip(prompts, out, strict=True)]
                before = LEDGER.snapshot()
                t0 = time.perf_counter()
                session(follow, list(range(batch)), 1)
                acc = account(LEDGER.since(before), time.perf_counter() - t0)
                decode = acc["phases"]["decode"]
                rows_out.append(
                    {
                        "dtype": dtype,
                        "batch": batch,
                        "threads": threads,
                        "decode_tokens_per_s": decode["tokens"] / decode["seconds"],
                        "ms_per_step": 1e3 * decode["seconds"] / max(tokens - 1, 1),
                        "share_of_bound": decode["share_of_bound"],
                        "bound_ms_per_step": 1e3 * decode["bound_s"] / max(tokens - 1, 1),
                    }
                )
                print(json.dumps(rows_out[-1]), flush=True)
        torch.set_num_threads(threads_max)
    return {"stage": f"decode alone after a {context}-token prompt, {tokens} steps", "rows": rows_out}


def side_linears(model: str, context: int, tokens: int, batches: list[int], repeats: int) -> dict[str, Any]:
    """The decode steps' routed bf16 linears (``trace_train/engine/linears.py``) against torch's default path,
    paired: for each batch size, ``repeats`` rounds of (default, routed), each a fresh session over the same
    prompts with ``tokens`` greedy steps timed after the prefill. Medians of ms per step, and whether both
    picked the same tokens."""
    import statistics

    import torch

    from trace_train.engine import engine_for
    from trace_train.policies.base import SamplingConfig
    from trace_train.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(model, dtype="bfloat16")
    engine = engine_for(policy)
    vocab = policy.model.config.vocab_size
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=tokens, min_new_tokens=tokens)
    rows_out = []
    for batch in batches:
        g = torch.Generator().manual_seed(batch)
        shared = torch.randint(100, vocab, (context - 50,), generator=g).tolist()
        prompts = [shared + torch.randint(100, vocab, (50,), generator=g).tolist() for _ in range(batch)]
        ms: dict[bool, list[float]] = {False: [], True: []}
        picked: dict[bool, list] = {}
        for _ in range(repeats):
            for routed in (False, True):
                engine.linears.enabled = routed
                session = engine.session(sampling)
                first, _ = session(prompts, list(range(batch)), 0)
                follow = [p + o + [shared[0]] for p, o in zip(prompts, first, strict=True)]
                before = engine.stats.decode_seconds
                second, _ = session(follow, list(range(batch)), 1)
                ms[routed].append(1e3 * (engine.stats.decode_seconds - before) / (tokens - 1))
                picked[routed] = [first, second]
        default, routed_ms = statistics.median(ms[False]), statistics.median(ms[True])
        rows_out.append(
            {
                "batch": batch,
                "default_ms_per_step": round(default, 1),
                "routed_ms_per_step": round(routed_ms, 1),
                "speedup": round(default / routed_ms, 3),
                "default_runs": [round(x, 1) for x in ms[False]],
                "routed_runs": [round(x, 1) for x in ms[True]],
                "same_tokens": picked[False] == picked[True],
            }
        )
        print(json.dumps(rows_out[-1]), flush=True)
    return {
        "stage": f"routed decode linears vs default, bf16, after a {context}-token prompt",
        "rows": rows_out,
    }


SIDES = {"eval": side_eval, "train": side_train, "decode": side_decode, "linears": side_linears}


def run_side(name: str, **kw: Any) -> dict[str, Any]:
    """One side in its own process (its own peak memory, no state shared with the other side)."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        cmd = [
            sys.executable,
            __file__,
            "--side",
            name,
            "--side-args",
            json.dumps(kw),
            "--side-out",
            out.name,
        ]
        proc = subprocess.run(cmd, text=True)
        if proc.returncode != 0:
            return {"error": f"side {name} exited {proc.returncode}"}
        return json.loads(Path(out.name).read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sides", default="eval,train")
    p.add_argument("--model", default="retail-v2-smollm2-135m")
    p.add_argument("--eval-episodes", type=int, default=32)
    p.add_argument("--eval-batch", type=int, default=32)
    p.add_argument("--train-steps", type=int, default=2)
    p.add_argument("--train-env", default="trace/retail-policy-adherence-v0")
    p.add_argument("--label", default="before", help="name of this measurement in the results file")
    p.add_argument("--json-out", default=str(RESULTS / "stages.json"))
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--side-args", help=argparse.SUPPRESS)
    p.add_argument("--side-out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side:
        Path(a.side_out).write_text(json.dumps(SIDES[a.side](**json.loads(a.side_args)), default=str))
        return
    from trace_train.roofline import format_account

    report: dict[str, Any] = {
        "cpu": cpu_name(),
        "load_average_at_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": a.model,
    }
    for side in a.sides.split(","):
        if side == "eval":
            r = run_side("eval", episodes=a.eval_episodes, batch=a.eval_batch, model=a.model)
        elif side == "train":
            r = run_side("train", steps=a.train_steps, model=a.model, env_id=a.train_env)
        elif side == "decode":
            r = run_side(
                "decode",
                model=a.model,
                context=3400,
                tokens=33,
                batches=[1, 8, 32],
                dtypes=["bfloat16", "float32"],
            )
        elif side == "linears":
            r = run_side(
                "linears", model=a.model, context=3400, tokens=33, batches=[1, 2, 4, 8, 32], repeats=5
            )
        else:
            raise SystemExit(f"unknown side {side!r}: choose eval, train, decode, linears")
        report[side] = r
        print(f"\n== {r.get('stage', side)}: {r.get('seconds', 0):.0f} s", flush=True)
        if side in ("decode", "linears"):
            continue  # its rows were printed as they ran
        if r.get("roofline"):
            print(format_account(r["roofline"]), flush=True)
        else:
            print(r.get("error", "no model work recorded"))
    report["load_average_at_end"] = os.getloadavg()
    out = Path(a.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(out.read_text()) if out.is_file() else {}
    runs[a.label] = report
    out.write_text(json.dumps(runs, indent=2) + "\n")
    print(f"\nwritten to {out} as {a.label!r}")


if __name__ == "__main__":
    main()

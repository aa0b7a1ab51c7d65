"""Throughput benchmark, in one run on one machine:

(a) batched multi-turn rollouts (16 conversations per ``generate`` call) vs one conversation at a time,
    in generated tokens per second (target: >= 3x);
(b) seconds per GRPO step of trace's trainer vs TRL's ``GRPOTrainer`` on the same model, LoRA config,
    group size, prompts and completion length (target: ratio TRL / trace >= 1, i.e. not slower).

    python benchmarks/bench_rollout_and_grpo.py                 # embedded SmolLM2-135M
    python benchmarks/bench_rollout_and_grpo.py --tiny          # tiny random model (smoke test)

Completion lengths are pinned (min_new_tokens = max_new_tokens on both sides) so both trainers process
exactly the same number of tokens; both use the same model dtype (``--dtype``, float32 by default; LoRA
weights float32 on both sides), LoRA r=16 on all linear layers, beta=0, one optimiser step per generation
batch. trace's time per step is the wall time of a whole ``train()`` call (rollouts, loss, optimiser step,
metrics and the adapter save); TRL's is measured between its step callbacks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from trace_train.models import load_model, save_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, RolloutStats, collect

PROMPTS = [
    "Explain in one sentence why the sky is blue.",
    "Name three prime numbers and add them.",
    "Write a short greeting for a new colleague.",
    "What is the capital of France? Answer briefly.",
    "Give one tip for writing readable Python.",
    "Describe a cat in five words.",
    "What is 12 times 7?",
    "Suggest a name for a small bakery.",
]


class ChatBenchEnv(gym.Env):
    """A fixed 3-turn chat: the user asks, the agent replies, the user asks a follow-up, ... (no tools)."""

    def __init__(self, turns: int = 3):
        self.turns = turns
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.messages = [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": PROMPTS[(seed or 0) % len(PROMPTS)]},
        ]
        return list(self.messages), {"tools": []}

    def step(self, action):
        self.t += 1
        self.messages += [{"role": "assistant", "content": action}]
        done = self.t >= self.turns
        if not done:
            self.messages += [{"role": "user", "content": "Thanks. Can you say that differently?"}]
        return list(self.messages), float(len(action) % 2), done, False, {}


if "bench/chat-v0" not in gym.registry:
    gym.register("bench/chat-v0", entry_point=ChatBenchEnv)


def bench_rollouts(policy: HFPolicy, n: int, new_tokens: int, turns: int) -> dict[str, float]:
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    envs = [ChatBenchEnv(turns) for _ in range(n)]
    specs = [ResetSpec(seed=i) for i in range(n)]
    collect(policy, envs[:2], specs[:2], replace(sampling, max_new_tokens=4, min_new_tokens=4), 1)  # warm-up
    batched = RolloutStats()
    t0 = time.perf_counter()
    collect(policy, envs, specs, sampling, max_turns=turns, stats=batched)
    batched_wall = time.perf_counter() - t0
    single = RolloutStats()
    t0 = time.perf_counter()
    for env, spec in zip(envs, specs, strict=True):
        collect(policy, [env], [spec], sampling, max_turns=turns, stats=single)
    single_wall = time.perf_counter() - t0
    b = batched.generated_tokens / batched_wall
    s = single.generated_tokens / single_wall
    return {
        "conversations": n,
        "turns": turns,
        "new_tokens_per_turn": new_tokens,
        "batched_tokens_per_s": b,
        "sequential_tokens_per_s": s,
        "speedup": b / s,
        "batched_generate_calls": batched.generate_calls,
        "sequential_generate_calls": single.generate_calls,
    }


class PromptEnv(gym.Env):
    """Single-turn env over the benchmark prompts, so trace and TRL see the same prompts and reward."""

    def __init__(self):
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.prompt = PROMPTS[(seed or 0) % len(PROMPTS)]
        return [{"role": "user", "content": self.prompt}], {"tools": []}

    def step(self, action):
        return [], reward_fn([action])[0], True, False, {}


# ~355-token prompts (SmolLM2 tokenizer, chat template included) for the long-prompt comparison with TRL: a
# distinct context per prompt, so only a group's completions share a prompt
_FACTS = [
    "The warehouse in {c} ships {n} parcels a day and keeps a reserve of {m} units of every fast-moving item.",
    "Its night shift in {c} checks the inventory twice, and any count that differs by more than {m} is redone.",
    "Customers near {c} receive orders within {n} hours unless the weather closes the northern road.",
    "The manager in {c} wants a short report every week listing the {m} slowest products and their stock.",
]
LONG_PROMPTS = [
    " ".join(_FACTS[j % 4].format(c=city, n=10 + 7 * j + k, m=3 + j + k) for j in range(14))
    + f" Question {k}: summarise the situation in {city} in three sentences."
    for k, city in enumerate(["Lyon", "Osaka", "Quito", "Perth"])
]


class LongPromptEnv(PromptEnv):
    def reset(self, *, seed=None, options=None):
        gym.Env.reset(self, seed=seed)
        self.prompt = LONG_PROMPTS[(seed or 0) % len(LONG_PROMPTS)]
        return [{"role": "user", "content": self.prompt}], {"tools": []}


if "bench/longprompt-v0" not in gym.registry:
    gym.register("bench/longprompt-v0", entry_point=LongPromptEnv)


def reward_fn(texts: list[str]) -> list[float]:
    # distinct words / 20, uncapped: a capped reward saturates at 64 tokens, and a batch whose every group ties
    # has zero advantages, so trace skips its forward/backward (TRL still computes it) and the step measures
    # generation only (figure 4's simple side did, once)
    return [len(set(t.split())) / 20.0 for t in texts]


if "bench/prompt-v0" not in gym.registry:
    gym.register("bench/prompt-v0", entry_point=PromptEnv)


def bench_trace_grpo(
    model: str,
    steps: int,
    groups: int,
    g: int,
    comp: int,
    rank: int,
    dtype: str,
    env_id: str = "bench/prompt-v0",
    micro_batch: int | None = None,
    engine: str = "cached",
) -> list[float]:
    from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer

    args = GRPOArgs(
        engine=engine,
        env_id=env_id,
        model=model,
        out=tempfile.mkdtemp(prefix="bench-trace-"),
        steps=steps + 1,
        groups_per_step=groups,
        group_size=g,
        max_new_tokens=comp,
        max_turns=1,
        loss_type="grpo",
        beta=0.0,
        lora_rank=rank,
        lora_alpha=2 * rank,
        micro_batch_size=micro_batch or groups * g,
        save_every=0,
        tensorboard=False,
        progress=False,
        lr=1e-5,
        dtype=dtype,
    )
    trainer = GRPOTrainer(args)
    trainer.sampling = replace(trainer.sampling, min_new_tokens=comp)
    times = []
    for s in range(steps + 1):
        args.steps = s + 1
        t0 = time.perf_counter()
        metrics = trainer.train()
        times.append(time.perf_counter() - t0)
        if metrics.get(
            "zero_advantage_batch"
        ):  # no forward/backward ran: the step would measure generation only
            raise RuntimeError(
                f"step {s}: every group's rewards tied, so trace trained nothing; not comparable"
            )
    bench_trace_grpo.last_metrics = metrics  # type: ignore[attr-defined]
    return times[1:]  # drop the warm-up step


def bench_trl_grpo(
    model: str,
    steps: int,
    groups: int,
    g: int,
    comp: int,
    rank: int,
    dtype: str,
    prompts: list[str] | None = None,
) -> list[float]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trace_train.policies.hf import LoraSettings

    m, tok = load_model(model, dtype=dtype)
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p}]} for p in (prompts or PROMPTS) * 64]
    )
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=groups * g,
        num_generations=g,
        max_completion_length=comp,
        generation_kwargs={"min_new_tokens": comp},
        max_steps=steps + 1,
        learning_rate=1e-5,
        beta=0.0,
        loss_type="grpo",
        logging_steps=1000,
        save_strategy="no",
        gradient_accumulation_steps=1,
        num_iterations=1,
        temperature=1.0,
        disable_dropout=True,
        dataloader_num_workers=0,
        seed=0,
    )
    lora = LoraSettings(rank=rank, alpha=2 * rank)
    peft = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=m,
        reward_funcs=lambda completions, **kw: reward_fn(
            [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        ),
        args=cfg,
        train_dataset=data,
        processing_class=tok,
        peft_config=peft,
        callbacks=[Timer()],
    )
    trainer.train()
    return times[1:]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tiny", action="store_true", help="use a tiny random model (smoke test)")
    p.add_argument("--conversations", type=int, default=16)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--rollout-tokens", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--completion", type=int, default=32)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--skip", choices=["rollout", "grpo"], default=None)
    p.add_argument(
        "--dtype", default="float32", choices=["auto", "float32", "bfloat16"], help="model dtype (both sides)"
    )
    p.add_argument("--json-out", default=None)
    a = p.parse_args()
    torch.manual_seed(0)
    model = str(save_tiny_model(Path(tempfile.mkdtemp()) / "tiny")) if a.tiny else a.model
    report: dict[str, Any] = {
        "model": "tiny-random" if a.tiny else a.model,
        "torch_threads": torch.get_num_threads(),
    }
    if a.skip != "rollout":
        base, tok = load_model(model, dtype=a.dtype)
        r = bench_rollouts(HFPolicy(base, tok), a.conversations, a.rollout_tokens, a.turns)
        report["rollout"] = r
        print(
            f"(a) rollouts: {r['conversations']} conversations x {r['turns']} turns x {r['new_tokens_per_turn']} "
            f"tokens: batched {r['batched_tokens_per_s']:.1f} tok/s vs one-at-a-time "
            f"{r['sequential_tokens_per_s']:.1f} tok/s -> {r['speedup']:.2f}x (target >= 3x)",
            flush=True,
        )
    if a.skip != "grpo":
        kw = dict(
            steps=a.steps, groups=a.groups, g=a.group_size, comp=a.completion, rank=a.lora_rank, dtype=a.dtype
        )
        ours = bench_trace_grpo(model, **kw)
        theirs = bench_trl_grpo(model, **kw)
        o, t = statistics.median(ours), statistics.median(theirs)
        report["grpo"] = {
            "trace_s_per_step": o,
            "trl_s_per_step": t,
            "trl_over_trace": t / o,
            "trace_steps": ours,
            "trl_steps": theirs,
            **kw,
        }
        print(
            f"(b) GRPO step ({a.groups} prompts x G={a.group_size}, {a.completion} completion tokens, LoRA "
            f"r={a.lora_rank}): trace {o:.2f} s vs TRL {t:.2f} s -> TRL/trace = {t / o:.2f} (target >= 1)",
            flush=True,
        )
    print(json.dumps(report, indent=2))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

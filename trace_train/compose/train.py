"""Gate training (``trace compose``): only the gates learn; backbone and adapters stay frozen.

The loop (CleanRL-style, one function per job):

1. load the base, the N adapters and fresh gates (routing starts at the base);
2. collect labelled gate data (``data.py``) once, cached as ``OUT/gate_data.pt`` (resume reuses it);
3. each step: a batch of examples in a seeded order that depends only on (seed, step), one forward that
   records every layer's gate logits, loss = label_weight * gate CE + lm_weight * LM loss +
   balance_weight * load balancing, a clipped AdamW step on the gate parameters;
4. metrics (JSONL, TensorBoard, progress bar), an atomic checkpoint every ``save_every`` steps
   (gates, optimiser, RNG, step) from which ``--resume`` continues exactly;
5. the artefact (``artefact.py``): manifest, gates, adapters copied in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from trace_train.compose.artefact import AdapterSpec, adapter_dir, build_composition, save_composition
from trace_train.compose.config import RESUME_KEYS, ComposeArgs
from trace_train.compose.data import GateExample, collect_gate_data
from trace_train.compose.losses import IGNORE, balance_loss, label_loss, lm_loss_from_hidden
from trace_train.compose.model import Composition
from trace_train.grpo.checkpoint import (
    CheckpointError,
    find_checkpoint,
    rng_state,
    saved_config,
    set_rng_state,
    settings_mismatch,
)
from trace_train.metrics import MetricsLogger, peak_rss_mb
from trace_train.models import load_model, resolve_model
from trace_train.roofline import record_training


def adapter_specs(args: ComposeArgs) -> list[AdapterSpec]:
    """One spec per adapter, named after its env (``trace/foo-v0`` -> ``foo``) unless ``--names`` is given."""
    if len(args.adapters) != len(args.envs):
        raise ValueError(f"{len(args.adapters)} adapters but {len(args.envs)} envs: give one env per adapter")
    if args.names and len(args.names) != len(args.adapters):
        raise ValueError(f"{len(args.names)} names for {len(args.adapters)} adapters")
    specs = []
    for i, (path, env_id) in enumerate(zip(args.adapters, args.envs, strict=True)):
        name = args.names[i] if args.names else env_id.rsplit("/", 1)[-1].rsplit("-v", 1)[0]
        capability, description = _env_description(env_id)
        specs.append(AdapterSpec(name, str(adapter_dir(path)), env_id, capability or name, description))
    return specs


def _env_description(env_id: str) -> tuple[str | None, str | None]:
    try:
        from trace_gym.registration import env_card

        card = env_card(env_id)
        return card.capability, card.description
    except Exception:  # noqa: BLE001 - third-party envs have no card; the router then uses the name
        return None, None


def pad_batch(examples: list[GateExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded tensors (training forward, no generation): ids, attention, gate labels, LM mask."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, IGNORE)
    lm_mask = torch.zeros_like(ids)
    for i, e in enumerate(examples):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        attention[i, :n] = 1
        labels[i, :n] = torch.tensor(e.gate_labels)
        lm_mask[i, :n] = torch.tensor(e.lm_mask)
    return {"input_ids": ids, "attention_mask": attention, "gate_labels": labels, "lm_mask": lm_mask}


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Example indices of ``step``: consecutive slices of per-epoch permutations seeded by (seed, epoch)."""
    out: list[int] = []
    pos = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(pos, n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
        take = perm[offset : offset + batch_size - len(out)]
        out += take
        pos += len(take)
    return out


def micro_batches(examples: list[GateExample], max_tokens: int) -> list[list[GateExample]]:
    """Consecutive examples grouped so that each group, right-padded, holds at most ``max_tokens`` positions
    (one example alone when it is longer); 0 = one group."""
    if max_tokens <= 0:
        return [examples]
    groups: list[list[GateExample]] = []
    for e in examples:
        if groups:
            width = max(len(e.input_ids), *(len(x.input_ids) for x in groups[-1]))
            if width * (len(groups[-1]) + 1) <= max_tokens:
                groups[-1].append(e)
                continue
        groups.append([e])
    return groups


def gate_step_loss(
    composition: Composition,
    batch: dict[str, torch.Tensor],
    args: ComposeArgs,
    totals: dict[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """One forward with recorded gate logits; the weighted loss and its parts. ``totals``: the labelled
    tokens, LM targets and valid tokens of the whole batch when ``batch`` is one micro-batch of it: the label
    and LM losses are then this micro-batch's share of the batch means (they add up to them exactly) and the
    balance loss its own value weighted by its share of the valid tokens."""
    model = composition.model
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    with composition.recording() as logs:
        hidden = decoder(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
        ).last_hidden_state
    gate_logits = [layer[0] for layer in logs]
    totals = totals or {}
    valid = int(batch["attention_mask"].sum())
    # the roofline's count of this forward and its backward (the gates train, the model is frozen): the gate
    # training's share of TRACE's training compute (the equal-compute baseline's budget)
    record_training(
        model,
        [(int(n), 0) for n in batch["attention_mask"].sum(1).tolist()],
        int(batch["lm_mask"].sum()),
    )
    parts = {
        "label_loss": label_loss(gate_logits, batch["gate_labels"], totals.get("labels")),
        "lm_loss": lm_loss_from_hidden(
            hidden, head, batch["input_ids"], batch["lm_mask"], totals.get("lm_targets")
        ),
        "balance_loss": balance_loss(gate_logits, batch["attention_mask"])
        * (valid / totals.get("valid", valid)),
    }
    parts["loss"] = (
        args.label_weight * parts["label_loss"]
        + args.lm_weight * parts["lm_loss"]
        + args.balance_weight * parts["balance_loss"]
    )
    with torch.no_grad():
        labels = batch["gate_labels"].reshape(-1)
        known = labels != IGNORE
        hits = [(lg.argmax(-1)[known] == labels[known]).float().sum() for lg in gate_logits]
        parts["label_hits"] = torch.stack(hits).mean()
        parts["label_count"] = known.sum().float()
        parts["slot_tokens"] = torch.tensor(composition.slot_share(logs)) * len(labels)
    return parts


def gate_step(
    composition: Composition, examples: list[GateExample], args: ComposeArgs, pad_id: int
) -> dict[str, float]:
    """Forward and backward of one batch in micro-batches of at most ``args.micro_batch_tokens`` padded
    positions (gradients accumulate: the label and LM losses equal the whole batch's; the balance loss is
    each micro-batch's own, weighted by its share of the tokens). Returns the batch's metrics."""
    groups = [pad_batch(g, pad_id) for g in micro_batches(examples, args.micro_batch_tokens)]
    totals = {
        "labels": sum(int((b["gate_labels"] != IGNORE).sum()) for b in groups),
        "lm_targets": sum(int((b["lm_mask"][:, 1:] == 1).sum()) for b in groups),
        "valid": sum(int(b["attention_mask"].sum()) for b in groups),
    }
    sums: dict[str, float] = {}
    for batch in groups:
        parts = gate_step_loss(composition, batch, args, totals)
        parts["loss"].backward()
        for k, v in parts.items():
            sums[k] = sums.get(k, 0.0) + (v.detach().double() if v.dim() else float(v.detach()))
    out = {k: float(sums[k]) for k in ("label_loss", "lm_loss", "balance_loss", "loss")}
    out["label_accuracy"] = sums["label_hits"] / sums["label_count"] if sums["label_count"] else float("nan")
    share = sums["slot_tokens"] / max(float(sums["slot_tokens"].sum()), 1.0)
    for name, s in zip(composition.slot_names, share.tolist(), strict=True):
        out[f"share_{name}"] = s
    out["micro_batches"] = len(groups)
    return out


class GateTrainer:
    def __init__(self, args: ComposeArgs):
        self.args = args
        self.out = Path(args.out)
        self.specs = adapter_specs(args)
        base, self.tokenizer = load_model(args.model, dtype=args.dtype, device="cpu")  # trained on the CPU
        self.composition = build_composition(
            base, self.specs, base_path=str(resolve_model(args.model)), base_bias=args.base_bias
        )
        torch.manual_seed(args.seed)
        self.optimizer = torch.optim.AdamW(self.composition.gate_parameters(), lr=args.lr, weight_decay=0.0)
        self.step = 0
        self.data: list[GateExample] = []
        self.data_report: dict[str, Any] = {}

    # ----- data -------------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        cache = self.out / "gate_data.pt"
        if self.args.resume and cache.is_file():
            blob = torch.load(cache, weights_only=False)
            self.data = [GateExample(**e) for e in blob["examples"]]
            self.data_report = blob["report"]
            return
        self.composition.model.eval()
        examples, report = collect_gate_data(
            self.composition, self.tokenizer, list(self.args.envs), self.args
        )
        self.data, self.data_report = examples, report.per_slot
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.out / ".gate_data.pt.tmp"
        torch.save({"examples": [e.to_json() for e in examples], "report": report.per_slot}, tmp)
        os.replace(tmp, cache)

    # ----- checkpoints --------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return dataclasses.asdict(self.args)

    def save_checkpoint(self) -> Path:
        root = self.out / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{self.step:07d}"
        staging = Path(tempfile.mkdtemp(dir=root, prefix=".staging-"))
        save_file(self.composition.gate_state_dict(), str(staging / "gates.safetensors"))
        torch.save(
            {"optimizer": self.optimizer.state_dict(), "step": self.step, "rng": rng_state()},
            staging / "trainer.pt",
        )
        (staging / "config.json").write_text(json.dumps(self._config(), indent=2, default=str))
        (staging / "COMPLETE").write_text(str(self.step))
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".latest-")
        with os.fdopen(fd, "w") as f:
            f.write(final.name)
        os.replace(tmp, root / "latest")
        return final

    def load_checkpoint(self) -> None:
        ckpt = find_checkpoint(self.out / "checkpoints")
        # a key a checkpoint of an older version lacks had its default then
        defaults = {f.name: f.default for f in dataclasses.fields(ComposeArgs)}
        detail = settings_mismatch({**defaults, **saved_config(ckpt)}, self._config(), RESUME_KEYS)
        if detail:
            raise CheckpointError(f"checkpoint {ckpt} does not match this run ({detail})")
        try:
            gates = load_file(str(ckpt / "gates.safetensors"))
            blob = torch.load(ckpt / "trainer.pt", weights_only=False)
        except Exception as e:  # truncated or garbled files
            raise CheckpointError(f"{ckpt}: corrupt checkpoint ({type(e).__name__}: {e})") from e
        self.composition.load_gate_state_dict(gates)
        self.optimizer.load_state_dict(blob["optimizer"])
        set_rng_state(blob["rng"])
        self.step = int(blob["step"])

    # ----- the loop ---------------------------------------------------------------------------------
    def train(self, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run to ``args.steps``. ``on_step(step, metrics)`` after each step replaces the progress bar (a caller
        with its own progress display, e.g. the pipeline's log lines)."""
        a = self.args
        has_checkpoint = (self.out / "checkpoints" / "latest").is_file()
        if a.resume and not (self.out / "gate_data.pt").is_file():
            raise CheckpointError(
                f"--resume: {self.out / 'gate_data.pt'} is missing"
                + ("" if has_checkpoint else f" and there is no checkpoint under {self.out / 'checkpoints'}")
            )
        self.prepare_data()
        if a.resume and has_checkpoint:
            self.load_checkpoint()
        model = self.composition.model
        model.train()  # no dropout in LoRA here; train() only matters for models with dropout layers
        pad = self.tokenizer.pad_token_id
        logger = MetricsLogger(self.out, tensorboard=a.tensorboard, total_steps=0)
        last: dict[str, Any] = {}
        progress = _progress(a.steps, self.step) if on_step is None else None
        try:
            while self.step < a.steps:
                t0 = time.perf_counter()
                picked = [
                    self.data[i] for i in batch_indices(len(self.data), a.batch_size, self.step, a.seed)
                ]
                self.optimizer.zero_grad(set_to_none=True)
                last = gate_step(self.composition, picked, a, pad)
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.composition.gate_parameters(), a.max_grad_norm
                )
                self.optimizer.step()
                self.step += 1
                last.update(
                    grad_norm=float(grad_norm),
                    step_seconds=time.perf_counter() - t0,
                    peak_memory_mb=peak_rss_mb(),
                )
                logger.log(self.step, last)
                if progress is not None:
                    progress.update(progress.task_ids[0], completed=self.step, status=step_status(last))
                if on_step is not None:
                    on_step(self.step, last)
                if a.save_every and (self.step % a.save_every == 0 or self.step == a.steps):
                    self.save_checkpoint()
        finally:
            logger.close()
            if progress is not None:
                progress.stop()
        model.eval()
        save_composition(
            self.composition,
            self.out,
            base_model=a.model,
            training={
                "args": self._config(),
                "data": self.data_report,
                "examples": len(self.data),
                "final": last,
            },
        )
        return {"step": self.step, **last, "data": self.data_report}


def step_status(m: dict[str, float]) -> str:
    """A step's metrics in one short line (progress displays)."""
    return f"loss {m['loss']:.3f} label-acc {m['label_accuracy']:.2f} base-share {m.get('share_base', 0):.2f}"


def _progress(total: int, done: int):
    if total <= done:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("[bold]compose"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
    )
    progress.add_task("gates", total=total, completed=done, status="")
    progress.start()
    return progress


def compose(
    args: ComposeArgs, on_step: Callable[[int, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Train the gates and write the artefact to ``args.out``; returns the last step's metrics. ``on_step``: see
    :meth:`GateTrainer.train`."""
    return GateTrainer(args).train(on_step)

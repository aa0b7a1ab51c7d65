"""Which slot wrote each token of one assistant turn, and what each slot alone would have written there.

``trace explain`` replays one recorded turn through a composition (teacher forcing: the turn's own tokens are
fed, nothing is sampled) and reads, for every token of the turn:

* the slot the gate of every decoder layer chose (top-1 routing is per token and per layer);
* the log-probability of the recorded token under the gated model and under each slot forced alone
  (slot 0 is the base);
* the token each of them would have put there instead (its argmax).

Routing at a position depends only on the hidden states up to it, so a teacher-forced pass computes what
generation computes at the same prefix (up to batch numerics). With ``--against`` the turn is the first where
two episodes of the same task differ (e.g. the base's success and the MoE's failure), and the first token where
the gated model would leave the recorded text names the slot that took it there.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass
class TokenRow:
    token: str
    layer_slots: list[int]  # the slot each layer's gate chose for this token
    logprob: dict[str, float]  # the recorded token's log-probability: "gated" and each slot name
    argmax: dict[str, str]  # what "gated" and each slot would have written here


@dataclass
class TurnExplanation:
    seed: int
    turn: int  # index among the episode's assistant turns
    slot_names: list[str]
    prompt_tokens: int
    rows: list[TokenRow] = field(default_factory=list)

    @property
    def first_departure(self) -> int | None:
        """Index of the first token where the gated model's argmax is not the recorded token."""
        return self.first_departure_of("gated")

    def first_departure_of(self, model: str) -> int | None:
        """Index of the first token where ``model`` ("gated" or a slot name) would not write the recorded one."""
        return next((i for i, r in enumerate(self.rows) if r.argmax[model] != r.token), None)

    def layer_share(self) -> dict[str, float]:
        """Share of (token, layer) routing decisions per slot over the whole turn."""
        counts = Counter(s for r in self.rows for s in r.layer_slots)
        total = sum(counts.values()) or 1
        return {name: counts.get(k, 0) / total for k, name in enumerate(self.slot_names)}


def read_episode(path: str | Path, seed: int) -> dict[str, Any]:
    """The episode record of task ``seed`` in a trajectory file (e.g. an evaluation's ``base.jsonl``)."""
    from trace_gym.records import read_records

    records = read_records(path, missing_ok=False)  # names the line of a malformed record
    for record in records:
        if record["seed"] == seed:
            return record
    seeds = sorted(r["seed"] for r in records)
    raise ValueError(f"{path} has no episode of seed {seed} (it has {len(seeds)}: {seeds[:20]}...)")


def assistant_indices(record: dict[str, Any]) -> list[int]:
    return [i for i, m in enumerate(record.get("messages") or []) if m.get("role") == "assistant"]


def _turn_key(message: dict[str, Any]) -> str:
    return json.dumps({"content": message.get("content") or "", "calls": message.get("tool_calls") or []})


def first_divergence(a: dict[str, Any], b: dict[str, Any]) -> int | None:
    """The first assistant turn where two episodes of the same task differ (None: identical turns)."""
    if a.get("seed") != b.get("seed"):
        raise ValueError(f"the episodes are of different tasks (seeds {a.get('seed')} and {b.get('seed')})")
    ta = [a["messages"][i] for i in assistant_indices(a)]
    tb = [b["messages"][i] for i in assistant_indices(b)]
    for k, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if _turn_key(x) != _turn_key(y):
            return k
    return None if len(ta) == len(tb) else min(len(ta), len(tb))


def turn_ids(policy: Any, record: dict[str, Any], turn: int) -> tuple[list[int], list[int]]:
    """Token ids of the prompt before assistant turn ``turn`` (as the policy renders it) and of the turn."""
    indices = assistant_indices(record)
    if not 0 <= turn < len(indices):
        raise ValueError(
            f"episode of seed {record.get('seed')} has {len(indices)} assistant turns, no turn {turn}"
        )
    at = indices[turn]
    messages, tools = record["messages"], record.get("tools") or []
    prompt = policy.prompt_ids(messages[:at], tools)
    renderer = policy.renderer
    before = renderer.render(messages[:at], tools, add_generation_prompt=True)
    after = renderer.render(messages[: at + 1], tools, add_generation_prompt=False)
    if not after.startswith(before):
        raise ValueError("the chat template re-renders earlier turns; the turn's tokens cannot be isolated")
    return prompt, renderer.encode(after[len(before) :])


@torch.no_grad()
def explain_turn(comp: Any, policy: Any, record: dict[str, Any], turn: int) -> TurnExplanation:
    """Teacher-force assistant turn ``turn`` of ``record`` through ``comp`` gated and with each slot alone."""
    prompt, turn_tokens = turn_ids(policy, record, turn)
    if not turn_tokens:
        raise ValueError(f"assistant turn {turn} of seed {record.get('seed')} renders to no tokens")
    ids = torch.tensor([prompt + turn_tokens], device=comp.model.device)
    span = slice(len(prompt) - 1, ids.shape[1] - 1)  # positions whose next token is the turn's
    target = ids[0, len(prompt) :]
    tok = policy.tokenizer

    def pass_with(slot: int | None) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        with comp.forced(slot), comp.recording() as logs:
            logits = comp.model(ids).logits[0, span].float().log_softmax(-1)
        return logits, logs

    names = comp.slot_names
    gated, logs = pass_with(None)
    per_slot = {names[k]: pass_with(k)[0] for k in range(comp.num_slots)}
    # each layer's gate saw the whole sequence once: its logits are (T, slots); keep the turn's positions
    layer_slots = torch.stack([layer[0].argmax(-1) for layer in logs])[:, span]  # (layers, turn)
    dists = {"gated": gated, **per_slot}
    rows = []
    for i, token_id in enumerate(target.tolist()):
        rows.append(
            TokenRow(
                token=tok.decode([token_id]),
                layer_slots=layer_slots[:, i].tolist(),
                logprob={k: round(float(d[i, token_id]), 4) for k, d in dists.items()},
                argmax={k: tok.decode([int(d[i].argmax())]) for k, d in dists.items()},
            )
        )
    return TurnExplanation(int(record.get("seed", -1)), turn, names, len(prompt), rows)


def _slots_text(layer_slots: list[int], names: list[str]) -> str:
    counts = Counter(layer_slots)
    return ", ".join(f"{names[s]} {n}" for s, n in sorted(counts.items()))


def summary(expl: TurnExplanation) -> str:
    """One paragraph: where the gated model leaves the recorded turn, which slots routed it, what each says."""
    names = expl.slot_names
    share = ", ".join(f"{k} {v:.0%}" for k, v in expl.layer_share().items())
    head = f"Seed {expl.seed}, assistant turn {expl.turn} ({len(expl.rows)} tokens); layer routing: {share}."
    i = expl.first_departure
    if i is None:
        return head + " The gated model's argmax follows the recorded turn at every token."
    row = expl.rows[i]
    said = "; ".join(f"{k} {row.argmax[k]!r} ({row.logprob[k]:.2f})" for k in ["gated", *names])
    context = "".join(r.token for r in expl.rows[max(0, i - 12) : i])
    return (
        f"{head} At token {i} (after {context!r}) the gated model would write {row.argmax['gated']!r} instead of "
        f"{row.token!r}; its layers routed this token to {_slots_text(row.layer_slots, names)}. Each model's "
        f"argmax there (and the recorded token's log-probability): {said}."
    )


def to_markdown(expl: TurnExplanation) -> str:
    names = expl.slot_names
    header = ["#", "token", "layers per slot", *(f"logp {k}" for k in ["gated", *names]), "gated argmax"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for i, r in enumerate(expl.rows):
        cells = [
            str(i),
            repr(r.token),
            _slots_text(r.layer_slots, names),
            *(f"{r.logprob[k]:.2f}" for k in ["gated", *names]),
            "" if r.argmax["gated"] == r.token else repr(r.argmax["gated"]),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return summary(expl) + "\n\n" + "\n".join(lines) + "\n"


def to_json(expl: TurnExplanation) -> dict[str, Any]:
    return {**asdict(expl), "first_departure": expl.first_departure, "layer_share": expl.layer_share()}


def explain_changes(
    comp: Any, policy: Any, base: list[dict[str, Any]], moe: list[dict[str, Any]], limit: int = 10
) -> list[dict[str, Any]]:
    """For each task where exactly one of the base and the gated model succeeded (at most ``limit``), the first
    token where their episodes part: on a base success the MoE lost, the base's turn is replayed and the
    departure is where the gated model would leave it; on a MoE success the base lacked, the MoE's turn is
    replayed and the departure is where the base would leave it. Each entry names the layers' slots there and
    what every model (gated, base, each adapter alone) would write."""
    by_seed = {r["seed"]: r for r in base}
    out: list[dict[str, Any]] = []
    for other in sorted(moe, key=lambda r: r["seed"]):
        mine = by_seed.get(other["seed"])
        if mine is None or bool(mine["success"]) == bool(other["success"]):
            continue
        if len(out) >= limit:
            break
        lost = bool(mine["success"])
        turn = first_divergence(mine, other)
        # same turns and a different outcome (e.g. a sampled user simulator): nothing to replay
        if turn is None:
            continue
        recorded, model = (mine, "gated") if lost else (other, "base")
        result = explain_turn(comp, policy, recorded, turn)
        i = result.first_departure_of(model)
        entry: dict[str, Any] = {"seed": other["seed"], "change": "lost" if lost else "won", "turn": turn}
        if i is not None:
            row = result.rows[i]
            entry |= {
                "token": i,
                "before": "".join(r.token for r in result.rows[max(0, i - 12) : i]),
                "recorded": row.token,
                "argmax": row.argmax,
                "layer_slots": {name: row.layer_slots.count(k) for k, name in enumerate(result.slot_names)},
            }
        out.append(entry)
    return out

"""``trace explain``: the per-token slots and log-probabilities of one replayed turn are the ones generation sees."""

from __future__ import annotations

import json

import pytest
import torch

from tests.compose.helpers import randomise_gates
from trace_train.compose import explain
from trace_train.compose.baselines import MoEPolicy


def episode(seed: int, turns: list[str]) -> dict:
    messages = [{"role": "system", "content": "You are a shop assistant."}]
    for k, text in enumerate(turns):
        messages += [{"role": "user", "content": f"request {k}"}, {"role": "assistant", "content": text}]
    return {"seed": seed, "split": "test", "reward": 0.0, "success": False, "messages": messages, "tools": []}


def test_first_divergence():
    a = episode(3, ["hello there", "cancel order 7", "done"])
    assert explain.first_divergence(a, episode(3, ["hello there", "cancel order 7", "done"])) is None
    assert explain.first_divergence(a, episode(3, ["hello there", "cancel order 9", "done"])) == 1
    assert explain.first_divergence(a, episode(3, ["hello there"])) == 1  # one stopped early
    with pytest.raises(ValueError, match="different tasks"):
        explain.first_divergence(a, episode(4, ["hello there"]))


def test_read_episode_names_what_is_wrong(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(episode(1, ["a"])) + "\n" + json.dumps(episode(2, ["b"])) + "\n")
    assert explain.read_episode(path, 2)["seed"] == 2
    with pytest.raises(ValueError, match=r"no episode of seed 5 .*\[1, 2\]"):
        explain.read_episode(path, 5)
    path.write_text(json.dumps(episode(1, ["a"])) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"rows.jsonl:2 is not a JSON line"):
        explain.read_episode(path, 9)
    path.write_text(json.dumps({"seed": 1, "messages": []}) + "\n")
    with pytest.raises(ValueError, match=r"rows.jsonl:1 is not a trajectory record .*'split' is a required"):
        explain.read_episode(path, 1)
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        explain.read_episode(tmp_path / "missing.jsonl", 1)


@pytest.fixture
def spread(composition):
    randomise_gates(composition, seed=3)
    composition.model.eval()
    return composition, MoEPolicy(composition, composition.tokenizer)


def test_each_token_is_scored_from_its_own_prefix(spread):
    """Row i holds the log-probability of turn token i given the prompt and turn tokens before it, per slot
    and gated: each is recomputed here by a separate forward pass on exactly that prefix (an off-by-one in the
    positions, or a slot mix-up, fails)."""
    comp, policy = spread
    record = episode(7, ["sure, I can help", "I will cancel order 42 (reason: no longer needed)"])
    prompt, turn = explain.turn_ids(policy, record, 1)
    result = explain.explain_turn(comp, policy, record, 1)
    assert [r.token for r in result.rows] == [policy.tokenizer.decode([t]) for t in turn]
    assert result.prompt_tokens == len(prompt)
    for i in (0, len(turn) // 2, len(turn) - 1):
        ids = torch.tensor([prompt + turn[:i]])
        for name, slot in [("gated", None), *((n, k) for k, n in enumerate(comp.slot_names))]:
            with torch.no_grad(), comp.forced(slot):
                logp = comp.model(ids).logits[0, -1].float().log_softmax(-1)
            assert result.rows[i].logprob[name] == pytest.approx(float(logp[turn[i]]), abs=1e-3), (i, name)
            assert result.rows[i].argmax[name] == policy.tokenizer.decode([int(logp.argmax())])


def test_layer_slots_are_what_incremental_decoding_routes(spread):
    """The slots read from the one teacher-forced pass equal those each gate chooses when the turn is fed one
    token at a time with the KV cache, as generation does."""
    comp, policy = spread
    record = episode(8, ["I will cancel order 42 (reason: ordered by mistake)"])
    prompt, turn = explain.turn_ids(policy, record, 0)
    result = explain.explain_turn(comp, policy, record, 0)
    from trace_train.engine.cache import cache_argument

    name = cache_argument(comp.model)  # transformers renamed past_key_values to cache
    with torch.no_grad(), comp.recording() as logs:
        cache = comp.model(torch.tensor([prompt]), use_cache=True).past_key_values
        for t in turn[:-1]:
            cache = comp.model(torch.tensor([[t]]), use_cache=True, **{name: cache}).past_key_values
    # per layer: the prompt pass, then one call per fed token; the slot that wrote token i sits at the position
    # before it (the prompt's last, then each fed token)
    for layer, calls in enumerate(logs):
        steps = [calls[0][-1].argmax().item()] + [c[-1].argmax().item() for c in calls[1:]]
        assert steps == [r.layer_slots[layer] for r in result.rows], layer
    assert len({s for r in result.rows for s in r.layer_slots}) > 1, "the gates should spread tokens here"


def test_summary_names_the_departure(spread):
    comp, policy = spread
    result = explain.explain_turn(comp, policy, episode(9, ["cancel it"]), 0)
    text = explain.summary(result)
    i = result.first_departure
    if i is None:  # a random tiny model that reproduces a turn is not expected, but stays a valid outcome
        assert "follows the recorded turn" in text
    else:
        assert f"At token {i}" in text and repr(result.rows[i].argmax["gated"]) in text
    share = result.layer_share()
    assert set(share) == set(comp.slot_names) and sum(share.values()) == pytest.approx(1.0)
    assert explain.to_markdown(result).count("\n|") == len(result.rows) + 2  # header, rule, a row per token


def test_turn_out_of_range_is_named(spread):
    comp, policy = spread
    with pytest.raises(ValueError, match="has 1 assistant turns, no turn 3"):
        explain.explain_turn(comp, policy, episode(1, ["x"]), 3)


def test_cli_explains_the_first_divergence(composition, compose_base, tmp_path, capsys):
    from trace_train.cli import main
    from trace_train.compose.artefact import save_composition

    randomise_gates(composition, seed=3)
    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(episode(5, ["hello", "cancel order 7 now"])) + "\n")
    b.write_text(json.dumps(episode(5, ["hello", "cancel order 9 now"])) + "\n")
    out = tmp_path / "explain.json"
    code = main(["explain", str(art), str(a), "--seed", "5", "--against", str(b), "--json-out", str(out)])
    assert code == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["turn"] == 1 and data["slot_names"] == composition.slot_names
    assert "".join(r["token"] for r in data["rows"]).startswith("cancel order 7 now")
    assert main(["explain", str(art), str(a), "--seed", "6"]) == 2
    assert "no episode of seed 6" in capsys.readouterr().err
    assert main(["explain", str(a), str(art), "--seed", "5"]) == 2  # swapped
    assert "the arguments look swapped" in capsys.readouterr().err


def _solved(record: dict, success: bool) -> dict:
    return {**record, "success": success, "reward": float(success)}


def test_explain_changes_replays_the_right_episode(spread):
    """A lost base success replays the base's turn and finds where the gated model leaves it; a MoE win replays
    the MoE's turn and finds where the base leaves it; tasks with the same outcome are skipped."""
    comp, policy = spread
    base = [
        _solved(episode(1, ["hello", "yes, cancel order 7"]), True),  # lost by the MoE
        _solved(episode(2, ["hello", "no"]), False),  # won by the MoE
        _solved(episode(3, ["hello", "maybe"]), False),  # both fail
    ]
    moe = [
        _solved(episode(1, ["hello", "no, keep order 7"]), False),
        _solved(episode(2, ["hello", "yes, refund to card"]), True),
        _solved(episode(3, ["hello", "perhaps"]), False),
    ]
    entries = explain.explain_changes(comp, policy, base, moe)
    assert [(e["seed"], e["change"], e["turn"]) for e in entries] == [(1, "lost", 1), (2, "won", 1)]
    for entry, recorded, model in ((entries[0], base[0], "gated"), (entries[1], moe[1], "base")):
        expected = explain.explain_turn(comp, policy, recorded, 1)
        i = expected.first_departure_of(model)
        assert i is not None and entry["token"] == i
        assert entry["recorded"] == expected.rows[i].token and entry["argmax"] == expected.rows[i].argmax
        assert entry["argmax"][model] != entry["recorded"]
        assert sum(entry["layer_slots"].values()) == len(expected.rows[i].layer_slots)
    assert len(explain.explain_changes(comp, policy, base, moe, limit=1)) == 1

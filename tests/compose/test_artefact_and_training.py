"""Gate training end to end on toy envs: frozen backbone/adapters, exact resume, artefact round trip."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.compose.helpers import make_adapter, randomise_gates
from trace_train.compose.artefact import AdapterSpec, build_composition, load_composition, save_composition
from trace_train.compose.config import ComposeArgs
from trace_train.compose.model import CompositionError
from trace_train.compose.train import compose
from trace_train.models import build_tiny_model, load_model

ENVS = ["traintest/chat3-v0", "traintest/lookup-v0"]


def args_for(base, adapters, out, **kw) -> ComposeArgs:
    defaults = dict(
        adapters=[str(p) for p in adapters[:2]],
        envs=ENVS,
        out=str(out),
        model=str(base),
        episodes_per_env=2,
        base_episodes_per_env=1,
        min_reward=0.0,
        max_new_tokens=6,
        max_turns=2,
        rollout_batch_size=2,
        steps=4,
        batch_size=2,
        lr=0.05,
        save_every=2,
        tensorboard=False,
    )
    return ComposeArgs(**{**defaults, **kw})


@pytest.fixture(scope="module")
def trained(compose_base, adapters, tmp_path_factory):
    out = tmp_path_factory.mktemp("compose-run")
    result = compose(args_for(compose_base, adapters, out))
    return out, result


def test_training_changes_only_the_gates(trained, compose_base, adapters):
    out, result = trained
    assert result["step"] == 4
    comp, _, manifest = load_composition(out)
    assert manifest["slots"] == ["base", "chat3", "lookup"]
    fresh, _ = load_model(compose_base)
    ref = build_composition(
        fresh, [AdapterSpec(n, str(p)) for n, p in zip(["chat3", "lookup"], adapters[:2], strict=True)]
    )
    trained_sd, ref_sd = comp.model.state_dict(), ref.model.state_dict()
    assert trained_sd.keys() == ref_sd.keys()
    for k, v in trained_sd.items():
        if k.startswith("trace_gates."):
            continue
        assert torch.equal(v, ref_sd[k]), f"{k} changed during gate training"
    moved = [
        k for k in trained_sd if k.startswith("trace_gates.") and not torch.equal(trained_sd[k], ref_sd[k])
    ]
    assert moved, "the gates did not train"
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert (
        len(lines) == 4
        and {"label_loss", "lm_loss", "balance_loss", "share_base"} <= json.loads(lines[-1]).keys()
    )


def test_resume_is_exact(trained, compose_base, adapters, tmp_path):
    out, _ = trained
    full = load_file(str(out / "gates.safetensors"))
    part = tmp_path / "part"
    compose(args_for(compose_base, adapters, part, steps=2))
    # same data (cached), same order, same optimiser state: steps 3-4 after a restart equal the uninterrupted run
    compose(args_for(compose_base, adapters, part, steps=4, resume=True))
    resumed = load_file(str(part / "gates.safetensors"))
    assert full.keys() == resumed.keys()
    for k in full:
        assert torch.equal(full[k], resumed[k]), k


def test_resume_refuses_another_setup(trained, compose_base, adapters, tmp_path):
    out, _ = trained
    with pytest.raises(Exception, match="does not match this run"):
        compose(args_for(compose_base, adapters, out, steps=6, resume=True, batch_size=1))


def test_resume_reads_older_checkpoints_and_names_what_differs(trained, compose_base, adapters, tmp_path):
    import shutil

    from trace_train.grpo.checkpoint import CheckpointError, find_checkpoint

    out = tmp_path / "run"
    shutil.copytree(trained[0], out)
    config = find_checkpoint(out / "checkpoints") / "config.json"
    saved = json.loads(config.read_text())
    # a checkpoint written before base_bias existed lacks it: its default then is not a difference
    config.write_text(json.dumps({k: v for k, v in saved.items() if k != "base_bias"}))
    assert compose(args_for(compose_base, adapters, out, steps=5, resume=True))["step"] == 5
    config = find_checkpoint(out / "checkpoints") / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_bias": 7.0}))
    with pytest.raises(CheckpointError, match=r"base_bias: checkpoint=7\.0 now="):
        compose(args_for(compose_base, adapters, out, steps=6, resume=True))
    config.write_text('{"adapters": ')  # torn by a kill
    with pytest.raises(CheckpointError, match="unreadable config.json"):
        compose(args_for(compose_base, adapters, out, steps=6, resume=True))


@torch.no_grad()
def test_save_load_round_trip_is_exact(composition, tmp_path, compose_base):
    randomise_gates(composition, seed=5)
    save_composition(composition, tmp_path / "art", base_model=str(compose_base))
    loaded, _, _ = load_composition(tmp_path / "art")
    x = torch.randint(5, 300, (2, 13))
    assert torch.equal(loaded.model(x).logits, composition.model(x).logits)
    with loaded.recording() as a, composition.recording() as b:
        loaded.model(x), composition.model(x)
    assert loaded.slot_share(a) == composition.slot_share(b) and max(loaded.slot_share(a)) < 1.0


def test_tampered_artefact_is_refused(composition, tmp_path, compose_base):
    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    target = art / "adapters" / "cap1" / "adapter_model.safetensors"
    target.write_bytes(target.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(CompositionError, match="hash mismatch.*cap1"):
        load_composition(art)


def test_adapter_of_another_base_is_a_clear_error(compose_base, adapters, tmp_path):
    other_model, other_tok = build_tiny_model(seed=1, hidden_size=48)
    other_model.save_pretrained(tmp_path / "other")
    other_tok.save_pretrained(tmp_path / "other")
    foreign = make_adapter(tmp_path / "other", tmp_path / "foreign", seed=3)
    model, _ = load_model(compose_base)
    with pytest.raises(CompositionError, match="trained on base"):
        build_composition(model, [AdapterSpec("a", str(adapters[0])), AdapterSpec("b", str(foreign))])


def test_adapter_of_other_target_modules_is_a_clear_error(compose_base, adapters, tmp_path):
    other = make_adapter(compose_base, tmp_path / "other-targets", seed=4, targets=["k_proj", "o_proj"])
    model, _ = load_model(compose_base)
    with pytest.raises(CompositionError, match="share their target modules"):
        build_composition(model, [AdapterSpec("a", str(adapters[0])), AdapterSpec("b", str(other))])


def test_missing_adapter_dir_is_named(compose_base, tmp_path):
    model, _ = load_model(compose_base)
    with pytest.raises(FileNotFoundError, match="nope"):
        build_composition(model, [AdapterSpec("a", str(tmp_path / "nope"))])


def test_resume_with_data_but_no_checkpoint_reuses_the_data(
    trained, compose_base, adapters, tmp_path, monkeypatch
):
    """A run stopped after collecting its gate data but before its first checkpoint restarts at step 0 on the
    kept data (no new rollouts) and ends where an uninterrupted run ends."""
    import trace_train.compose.train as train_mod

    out, _ = trained
    full = load_file(str(out / "gates.safetensors"))
    part = tmp_path / "part"
    part.mkdir()
    (part / "gate_data.pt").write_bytes((out / "gate_data.pt").read_bytes())

    def no_rollouts(*a, **k):
        raise AssertionError("the kept gate data was collected again")

    monkeypatch.setattr(train_mod, "collect_gate_data", no_rollouts)
    compose(args_for(compose_base, adapters, part, steps=4, resume=True))
    resumed = load_file(str(part / "gates.safetensors"))
    for k in full:
        assert torch.equal(full[k], resumed[k]), k
    with pytest.raises(Exception, match="gate_data.pt is missing and there is no checkpoint"):
        compose(args_for(compose_base, adapters, tmp_path / "empty", steps=4, resume=True))

"""Shipped base agents: a recipe rebuilds its adapter, a changed file is refused, the run that asks for exactly
that fit gets it (and no other run does), and the merged model is the adapter's model."""

from __future__ import annotations

import json

import pytest
import torch

from trace_train import bases
from trace_train.bases.commands import install_fit
from trace_train.config import SFTArgs
from trace_train.sft import run_sft

ENV = "traintest/lookup-v0"  # tests/train/toy_envs.py


@pytest.fixture(scope="module")
def shipped(tiny_model_dir, tmp_path_factory) -> bases.ShippedBase:
    """A tiny fit installed as a shipped base in a scratch package directory."""
    root = tmp_path_factory.mktemp("bases")
    fit = root.parent / "fit"
    args = SFTArgs(
        env_id=ENV, model=str(tiny_model_dir), out=str(fit), episodes=6, epochs=1, batch_size=2, lr=1e-2,
        lora_rank=4, max_turns=4, snapshot_steps=[2],
    )  # fmt: skip
    run_sft(args)
    assert (fit / "snapshots" / "step-2" / "adapter_model.safetensors").is_file()
    return install_fit("toy-tiny", fit, root=root, dtype="float32")


def test_the_recipe_rebuilds_the_same_adapter(shipped, tmp_path):
    recipe = json.loads((shipped.directory / "recipe.json").read_text())
    assert recipe["sft"]["episodes"] == 6 and recipe["made"]["steps"] == 3
    rebuilt = run_sft(SFTArgs(**recipe["sft"], out=str(tmp_path / "again")))
    assert rebuilt["steps"] == 3
    again = bases.sha256_of(tmp_path / "again" / "adapter" / "adapter_model.safetensors")
    assert again == recipe["sha256"]["adapter_model.safetensors"]


def test_a_changed_adapter_file_is_refused(shipped, tmp_path):
    bases.verify(shipped)
    copy = tmp_path / "toy-tiny"
    copy.mkdir()
    for name in (*bases.ADAPTER_FILES, "recipe.json"):
        (copy / name).write_bytes((shipped.directory / name).read_bytes())
    weights = copy / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    changed = bases.by_name("toy-tiny", root=tmp_path)
    with pytest.raises(bases.ShippedBaseError, match="adapter_model.safetensors has sha256"):
        bases.verify(changed)
    with pytest.raises(bases.ShippedBaseError, match="adapter_model.safetensors has sha256"):
        bases.materialise(changed, tmp_path / "out")
    assert not (tmp_path / "out" / "merged").exists()


def test_only_the_exact_fit_finds_the_shipped_base(shipped):
    sft = shipped.recipe["sft"]
    key = dict(
        env_id=ENV, model=sft["model"], tool_format="json", lora_rank=4, lora_alpha=sft["lora_alpha"], seed=0
    )
    root = shipped.directory.parent
    assert bases.find_shipped(bases.recipe_key(**key, sft=sft), root=root) == shipped
    for change in (
        {"episodes": 7},
        {"lr": 2e-2},
        {"seed_offset": 1},
        {"difficulty": 2},
        {"levels": [1, 2]},
        {"teacher": "oracle-without:policy-adherence"},
    ):
        assert bases.find_shipped(bases.recipe_key(**key, sft={**sft, **change}), root=root) is None, change
    for change in ({"tool_format": "compact"}, {"lora_rank": 8}, {"seed": 1}, {"env_id": "trace/retail-v2"}):
        assert bases.find_shipped(bases.recipe_key(**{**key, **change}, sft=sft), root=root) is None, change
    # memory and checkpointing knobs change neither the data nor the updates
    same = {**sft, "micro_batch_tokens": 512, "gradient_checkpointing": True, "save_every": 5}
    assert bases.find_shipped(bases.recipe_key(**key, sft=same), root=root) == shipped
    # a recipe written before the teacher setting existed was fitted on the full oracle
    older = {**shipped.recipe, "sft": {k: v for k, v in sft.items() if k != "teacher"}}
    assert bases.key_of_recipe(older) == bases.recipe_key(**key, sft={**sft, "teacher": "oracle"})
    assert bases.key_of_recipe(older) != bases.recipe_key(**key, sft={**sft, "teacher": "oracle-without:x"})


def test_a_shipped_base_name_is_a_model_name(shipped, tmp_path, monkeypatch):
    from trace_train.models import resolve_model

    monkeypatch.setattr(bases, "BASES_DIR", shipped.directory.parent)
    monkeypatch.setenv("TRACE_CACHE", str(tmp_path / "cache"))
    merged = resolve_model("toy-tiny")
    assert merged.parent.name.startswith("base-toy-tiny-") and merged.parent.parent == tmp_path / "cache"
    assert (merged / "config.json").is_file() and resolve_model("toy-tiny") == merged  # merged once
    with pytest.raises(FileNotFoundError, match=r"or a shipped base \(toy-tiny; `trace base list`\)"):
        resolve_model("toy-tiny-2")


def test_the_merged_model_is_the_adapters_model(shipped, tmp_path):
    from trace_train.policies.hf import HFPolicy

    merged = bases.materialise(shipped, tmp_path / "m", dtype="float32")
    assert json.loads((tmp_path / "m" / "shipped.json").read_text())["name"] == "toy-tiny"
    with_adapter = HFPolicy.from_pretrained(
        shipped.recipe["sft"]["model"], adapter=shipped.adapter, device="cpu"
    )
    plain = HFPolicy.from_pretrained(merged, device="cpu")
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        a = with_adapter.model(input_ids=ids).logits
        b = plain.model(input_ids=ids).logits
        base = (
            HFPolicy.from_pretrained(shipped.recipe["sft"]["model"], device="cpu").model(input_ids=ids).logits
        )
    assert torch.allclose(a, b, atol=1e-4)
    assert not torch.allclose(a, base, atol=1e-3)  # the adapter moved the model: the check can fail


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("retail-v2-smollm2-135m", "demo"),
        ("retail-v2-smollm2-135m-without-policy-adherence", "known-policy-adherence"),
    ],
)
def test_the_shipped_base_is_intact_and_is_the_configs_warm_start(name, config):
    """The package ships retail-v2's base (and the planted one of the known-answer test); its files match the
    recipe, and the config asks for exactly that fit (so `trace run` loads it instead of fitting for an hour).
    Planting a changed lr in demo.toml fails this."""
    from trace_train.config import SFTSettings, settings_of
    from trace_train.pipeline.config import builtin_config, load_config

    shipped = bases.by_name(name)
    bases.verify(shipped)
    size = (shipped.directory / "adapter_model.safetensors").stat().st_size
    assert size < 50 * 2**20
    cfg = load_config(builtin_config(config))
    base = cfg.base
    key = bases.recipe_key(
        cfg.target.env_id, base.model, base.tool_format, base.lora_rank, base.lora_alpha, cfg.seed,
        settings_of(base.warm_start, SFTSettings),
    )  # fmt: skip
    assert base.warm_start.enabled and base.warm_start.shipped
    assert bases.find_shipped(key) == shipped
    if config == "demo":
        assert "evaluation" in shipped.recipe  # its measured success ships with it


def test_the_base_commands(shipped, tmp_path, monkeypatch, capsys):
    from trace_train.cli import main

    monkeypatch.setattr(bases, "BASES_DIR", shipped.directory.parent)
    assert main(["base", "list"]) == 0
    assert "shipped base toy-tiny" in capsys.readouterr().out
    assert main(["base", "verify"]) == 0
    assert "toy-tiny: ok" in capsys.readouterr().out
    assert main(["base", "build", "toy-tiny", "--out", str(tmp_path / "b")]) == 0
    assert "equals the shipped one" in capsys.readouterr().out
    assert main(["base", "verify", "nope"]) == 2
    assert "no shipped base named 'nope'" in capsys.readouterr().out

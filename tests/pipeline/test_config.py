"""Config loading: the published schema, the built-in configs, and clear errors for bad input."""

from __future__ import annotations

import pytest

from trace_train.pipeline.config import (
    CONFIG_DIR,
    ConfigError,
    builtin_config,
    json_schema,
    load_config,
    parse_override,
    published_schema,
)


def test_published_schema_matches_the_dataclasses():
    # regenerate with: python -m trace_train.pipeline.config --schema
    assert published_schema() == json_schema()


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.toml")))
def test_builtin_configs_validate(name):
    config = load_config(builtin_config(name))
    assert config.name == name


def write(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[adapter]\nsteps = 3\n", "unknown key 'adapter' (did you mean 'adapters'?) in the top level"),
        ("[adapters]\nstep = 3\n", "unknown key 'step' (did you mean 'steps'?) in [adapters]"),
        ("[adapters]\nsteps = 0\n", "adapters.steps: 0 is less than the minimum of 1"),
        ("[adapters]\nsteps = 'ten'\n", "adapters.steps: 'ten' is not of type 'integer'"),
        ("[adapters]\nloss_type = 'ppo'\n", "adapters.loss_type: 'ppo' is not one of"),
        (
            "[evaluation]\nmethods = ['base', 'moe', 'moe']\n",
            "evaluation.methods: ['base', 'moe', 'moe'] has non-unique",
        ),
        ("[base.warm_start]\nenabled = 'yes'\n", "base.warm_start.enabled: 'yes' is not of type 'boolean'"),
        ("[target]\nenv_id = \n", "not valid TOML"),
        (
            "[evaluation]\nepisodes = 8\nadapter_episodes = 16\n",
            "evaluation.adapter_episodes (16) exceeds evaluation.episodes (8)",
        ),
    ],
)
def test_bad_configs_name_the_problem(tmp_path, text, message):
    with pytest.raises(ConfigError, match="run.toml") as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)


def test_missing_file_and_unknown_builtin(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(
        ConfigError,
        match="built-in: arith, bfcl-quick, demo, gpu, known-policy-adherence, known-structured-reasoning, quick",
    ):
        builtin_config("fast")


def test_overrides_are_validated_too(tmp_path):
    path = write(tmp_path, "[adapters]\nsteps = 3\n")
    config = load_config(path, dict([parse_override("adapters.steps=7"), parse_override("out=/tmp/x")]))
    assert config.adapters.steps == 7 and config.out == "/tmp/x"
    assert isinstance(load_config(path, dict([parse_override("adapters.lr=1")])).adapters.lr, float)
    with pytest.raises(ConfigError, match="adapters.steps: -2 is less than the minimum"):
        load_config(path, dict([parse_override("adapters.steps=-2")]))
    with pytest.raises(ConfigError, match="expected section.key=value"):
        parse_override("adapters.steps")


@pytest.mark.parametrize("capability", ["policy-adherence", "structured-reasoning"])
def test_a_known_answer_config_is_the_demo_with_a_planted_teacher(capability):
    """Issue 49: the loop on a planted base runs with the demo's settings; only the name, the output folder and
    the warm start's teacher differ (a demo setting changed without its known-answer configs fails here)."""
    import dataclasses

    demo = load_config(builtin_config("demo"))
    known = load_config(builtin_config(f"known-{capability}"))
    assert known.base.warm_start.teacher == f"oracle-without:{capability}"
    assert (known.name, known.out) == (f"known-{capability}", f"runs/known-{capability}")
    known.base.warm_start.teacher = demo.base.warm_start.teacher
    known.name, known.out = demo.name, demo.out
    assert dataclasses.asdict(known) == dataclasses.asdict(demo)

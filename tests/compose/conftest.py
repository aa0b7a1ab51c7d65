from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
import toy_envs  # noqa: E402

toy_envs.register()

from tests.compose.helpers import make_adapter  # noqa: E402


@pytest.fixture(scope="session")
def compose_base(tmp_path_factory) -> Path:
    from trace_train.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("compose") / "base")


@pytest.fixture(scope="session")
def adapters(compose_base, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("adapters")
    return [make_adapter(compose_base, root / f"a{i}", seed=10 + i) for i in range(3)]


@pytest.fixture
def composition(compose_base, adapters):
    from trace_train.compose.artefact import AdapterSpec, build_composition
    from trace_train.models import load_model

    model, tokenizer = load_model(compose_base)
    comp = build_composition(model, [AdapterSpec(f"cap{i}", str(p)) for i, p in enumerate(adapters)])
    comp.tokenizer = tokenizer
    return comp


def pytest_configure(config):
    torch.set_num_threads(1)

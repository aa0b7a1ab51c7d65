from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import toy_envs  # noqa: E402

toy_envs.register()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from trace_train.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def tiny_policy():
    from trace_train.models import build_tiny_model
    from trace_train.policies.hf import HFPolicy

    model, tok = build_tiny_model()
    return HFPolicy(model, tok, name="tiny")


def pytest_configure(config):
    # The tiny model's matmuls are too small for intra-op threads; one thread avoids oversubscription
    # stalls when other processes share the (2) cores.
    import torch

    torch.set_num_threads(1)

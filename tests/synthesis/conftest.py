from __future__ import annotations

import pytest


@pytest.fixture
def tiny_policy():
    import torch

    from trace_train.models import build_tiny_model
    from trace_train.policies.hf import HFPolicy

    torch.set_num_threads(1)
    model, tok = build_tiny_model()
    return HFPolicy(model, tok, name="tiny")

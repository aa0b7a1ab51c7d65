"""The settings of a BFCL env (``gym.make(id, **kwargs)`` takes them as keyword arguments)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_gym.targets.bfcl.data import CATEGORIES


@dataclass(frozen=True)
class BfclConfig:
    categories: tuple[str, ...] = CATEGORIES  # BFCL categories the env draws tasks from (in BFCL's order)
    # Agent turns in all. The longest ground truth takes 38 with the oracle's one call per step.
    max_turns: int = 120
    max_invalid_turns: int = 5  # turns with a call trace rejected (parse, unknown_tool, schema)
    # Calls in one assistant turn; BFCL's longest ground-truth turn has 34 calls.
    max_tool_calls_per_turn: int = 40

    def __post_init__(self) -> None:
        categories = tuple(self.categories)
        if not categories or set(categories) - set(CATEGORIES):
            raise ValueError(
                f"categories must be a non-empty subset of {list(CATEGORIES)}, got {categories!r}"
            )
        object.__setattr__(self, "categories", tuple(c for c in CATEGORIES if c in categories))
        for name in ("max_turns", "max_invalid_turns", "max_tool_calls_per_turn"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")

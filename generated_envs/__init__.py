"""Plugin package that synthesis writes generated capability environments into."""

from __future__ import annotations

import importlib
import pkgutil


def register_envs() -> None:
    """Entry point of the ``trace_gym.envs`` group: import every generated sub-package.

    Each sub-package registers its own ``trace/<capability>-v0`` id next to its env class when imported.
    """
    for module in pkgutil.iter_modules(__path__):
        if module.ispkg:
            importlib.import_module(f"{__name__}.{module.name}")

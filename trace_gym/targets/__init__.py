"""Target environments: the tasks an agent is meant to solve (and fails on, for step 1)."""

import importlib
import pkgutil


def register_envs() -> None:
    """Import each target sub-package; each registers its ids next to its env class."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")

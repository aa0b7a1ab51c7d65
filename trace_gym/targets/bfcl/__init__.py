"""BFCL's multi-turn categories as trace targets (see docs/bfcl.md).

The ids are registered whether or not bfcl-eval is installed (registering imports nothing of it); making one
without it raises :class:`~trace_gym.targets.bfcl.data.BfclNotInstalledError` with the install line.
"""

from trace_gym.registration import register_env

ENTRY_POINT = "trace_gym.targets.bfcl.env:BfclMultiTurnEnv"
# id -> the BFCL categories it draws from
IDS: dict[str, tuple[str, ...]] = {
    "trace/bfcl-multi-turn-v0": ("base", "miss_func", "miss_param", "long_context"),
    "trace/bfcl-multi-turn-base-v0": ("base",),
    "trace/bfcl-multi-turn-miss-func-v0": ("miss_func",),
    "trace/bfcl-multi-turn-miss-param-v0": ("miss_param",),
    "trace/bfcl-multi-turn-long-context-v0": ("long_context",),
}

for _id, _categories in IDS.items():
    register_env(_id, entry_point=ENTRY_POINT, kwargs={"categories": _categories})

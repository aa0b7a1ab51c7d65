"""A good generated env module (the package's example) and five deliberately bad variants of it."""

from __future__ import annotations

from pathlib import Path

import trace_gym.synthesis

GOOD = (Path(trace_gym.synthesis.__file__).parent / "example_env.py").read_text()
CLASS = "StatusLookupV0"
ANCHOR = "        ids = IdMaker(rng)\n"


def _inject(code: str) -> str:
    assert ANCHOR in GOOD
    return GOOD.replace(ANCHOR, code + ANCHOR, 1)


BAD = {
    "infinite_loop": _inject("        while True:\n            pass\n"),
    "file_write": _inject(
        '        with open("/tmp/trace-leak.txt", "w") as leak:\n            leak.write("x")\n'
    ),
    "socket_import": _inject(
        '        import socket\n\n        socket.create_connection(("example.com", 80))\n'
    ),
    "eval_of_user_text": GOOD.replace(
        '        said = self.agent_messages[-1].lower() if self.agent_messages else ""\n',
        '        said = str(eval(self.agent_messages[-1])) if self.agent_messages else ""\n',
    ),
    "wrong_spaces": GOOD.replace(
        "    def _make_tools(self)",
        "    def __init__(self, **kwargs):\n        super().__init__(**kwargs)\n"
        "        import gymnasium\n\n        self.observation_space = gymnasium.spaces.Discrete(3)\n\n"
        "    def _make_tools(self)",
    ),
}
# Passes the static check (no forbidden name) but writes a file at run time: the audit hook must catch it.
SNEAKY_WRITE = _inject(
    '        np.lib.format.open_memmap("/tmp/trace-sneaky.npy", mode="w+", dtype="f4", shape=(2,))\n'
)
# The reason each bad module must be rejected with (a fragment of it).
EXPECTED = {
    "infinite_loop": "CPU-time limit",
    "file_write": "'open' is not allowed",
    "socket_import": "import of 'socket' is not allowed",
    "eval_of_user_text": "'eval' is not allowed",
    "wrong_spaces": "check_env",
}

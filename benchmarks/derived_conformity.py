"""Issue 26, Must show 1: the format-conformity table of the target-derived capability envs.

    python benchmarks/derived_conformity.py                 # 200 train seeds per env, level 1
    python benchmarks/derived_conformity.py --seeds 20 --only retail

Per env (BFCL's four capabilities and retail-v2's seven, each constructed directly with
``DerivedCapabilityEnv(target_id=..., capability=...)``, level 1), on each seed the env is reset and
compared with a fresh target reset on the source task with the same prefix replayed
(:func:`trace_gym.core.conformity.compare`); then the target oracle's continuation is played and the whole
episode (prefix + continuation, what the agent saw) is read:

* authenticated: a successful ``find_user_id_by_email`` / ``find_user_id_by_name_zip`` call (retail);
* confirmed with details: per write, the last assistant message to the user before it names every argument
  value of the write (ids, items, payment method, reason, address fields) and the user's next message is a
  yes (retail's ``affirmative``);
* ids never shown: per write, an id argument (a name ending in ``_id`` / ``_ids``) whose value occurs in no
  earlier system, user or tool message, i.e. nothing the agent was shown (must be 0);
* test-split sources: source task keys among the target's test task keys (BFCL: all test tasks; retail: test
  seeds ``0..--test-keys - 1``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import trace_gym  # noqa: E402,F401 - registers the ids
from trace_gym.core.conformity import compare, make_target, user_simulator  # noqa: E402
from trace_gym.derived.env import DerivedCapabilityEnv  # noqa: E402
from trace_gym.targets.bfcl.env import CAPABILITIES as BFCL_CAPABILITIES  # noqa: E402
from trace_gym.targets.retail.llm_user import affirmative  # noqa: E402
from trace_gym.targets.retail.tasks import CAPABILITIES as RETAIL_CAPABILITIES  # noqa: E402

BFCL = "trace/bfcl-multi-turn-v0"
RETAIL = "trace/retail-v2"
AUTHENTICATION = ("find_user_id_by_email", "find_user_id_by_name_zip")


def calls_of(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or call
        arguments = fn.get("arguments") or {}
        out.append((str(fn.get("name")), json.loads(arguments) if isinstance(arguments, str) else arguments))
    return out


def said(message: dict[str, Any]) -> str:
    """What an assistant message tells the user (its content, or a ``respond_to_user`` call's text)."""
    text = [str(message.get("content") or "")]
    text += [str(args.get("message", "")) for name, args in calls_of(message) if name == "respond_to_user"]
    return "\n".join(t for t in text if t)


def values(arguments: dict[str, Any], ids_only: bool = False) -> list[str]:
    out = []
    for name, value in arguments.items():
        if ids_only and not name.endswith(("_id", "_ids")):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                out += [str(v) for v in item.values()]
            elif item is not None:
                out.append(str(item))
    return out


def writes_read(messages: list[dict[str, Any]], kinds: dict[str, str]) -> list[dict[str, Any]]:
    """Each write call of the episode: confirmed with details, and its id values never shown before it."""
    out = []
    shown = ""  # every system, user and tool message so far: what the agent was shown
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "user", "tool"):
            shown += "\n" + str(message.get("content") or "")
            continue
        for name, arguments in calls_of(message):
            if kinds.get(name) != "write":
                continue
            proposal = next(
                (
                    i
                    for i in range(index - 1, 0, -1)
                    if messages[i].get("role") == "assistant" and said(messages[i])
                ),
                None,
            )
            answer = (
                next((m for m in messages[proposal + 1 : index] if m.get("role") == "user"), None)
                if proposal
                else None
            )
            text = said(messages[proposal]) if proposal else ""
            missing = [v for v in values(arguments) if v not in text]
            out.append(
                {
                    "tool": name,
                    "confirmed": answer is not None and affirmative(str(answer.get("content") or "")),
                    "details_missing": missing,
                    "unseen_ids": [v for v in values(arguments, ids_only=True) if v not in shown],
                }
            )
    return out


def test_keys(target: Any, target_id: str, n: int) -> set[str]:
    count = len(target.split_tasks("test")) if hasattr(target, "split_tasks") else n
    keys = set()
    for seed in range(count):
        target.reset(seed=seed, options={"split": "test"})
        keys.add(target.task_key())
    return keys


def measure(env: Any, seeds: int, keys: set[str]) -> dict[str, Any]:
    """One env's conformity and episode figures over train seeds ``0..seeds-1``."""
    target = make_target(env)
    kinds = {tool.name: tool.kind for tool in env.domain_tools}
    identical: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    tools, users = set(), set()
    authenticated = confirmed = writes = unseen = in_test = replayed = 0
    missing: Counter[str] = Counter()
    unseen_examples: list[list[Any]] = []
    started = time.perf_counter()
    for seed in range(seeds):
        obs, info = env.reset(seed=seed, options={"split": "train"})
        for aspect, reason in compare(env, info, obs, target).items():
            identical[aspect] += reason is None
            if reason is not None:
                reasons.setdefault(aspect, f"seed {seed}: {reason}")
        tools.add(len(info.get("tools") or env.tools))
        users.add(type(user_simulator(env)).__name__)
        in_test += info["source"]["task_key"] in keys
        for action in env.oracle_actions():
            _, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                replayed += reward == 1.0
                break
        authenticated += any(c.name in AUTHENTICATION and c.error is None for c in env.calls)
        for write in writes_read(env.messages, kinds):
            writes += 1
            confirmed += write["confirmed"] and not write["details_missing"]
            missing.update(write["tool"] + ":" + v for v in write["details_missing"][:1])
            unseen += bool(write["unseen_ids"])
            if write["unseen_ids"] and len(unseen_examples) < 3:
                unseen_examples.append([info["source"]["task_id"], write["tool"], write["unseen_ids"]])
    return {
        "seeds": seeds,
        "system_prompt": identical["system_prompt"],
        "tools": identical["tools"],
        "tool_counts": sorted(tools),
        "action_space_tools": len(env.tools),
        "user_simulator": identical["user_simulator"],
        "user_class": sorted(users),
        "observation": identical["observation"],
        "replayed_1.0": replayed,
        "authenticated": authenticated,
        "writes": writes,
        "confirmed_with_details": confirmed,
        "unconfirmed_examples": missing.most_common(3),
        "writes_with_unseen_ids": unseen,
        "unseen_examples": unseen_examples,
        "sources_in_target_test": in_test,
        "target_test_keys": len(keys),
        "differences": reasons,
        "seconds": round(time.perf_counter() - started, 1),
    }


def row(name: str, r: dict[str, Any], retail: bool) -> str:
    n = r["seeds"]
    low, high = min(r["tool_counts"]), max(r["tool_counts"])
    counts = f"{low}" if low == high else f"{low}-{high}"
    tools = f"{r['tools']}/{n} ({counts} offered, {r['action_space_tools']} in the action space)"
    share = (lambda k: f"{r[k]}/{n}") if retail else (lambda k: "n/a")
    confirmed = f"{r['confirmed_with_details']}/{r['writes']}" if retail else "n/a"
    unseen = f"{r['writes_with_unseen_ids']}/{r['writes']}"
    return (
        f"| {name} | {r['system_prompt']}/{n} | {tools} | {', '.join(r['user_class'])} ({r['user_simulator']}/{n}) "
        f"| {r['observation']}/{n} | {r['replayed_1.0']}/{n} | {share('authenticated')} | {confirmed} | {unseen} "
        f"| {r['sources_in_target_test']}/{n} (of {r.get('target_test_keys', '?')} test keys) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--only", choices=("bfcl", "retail"))
    parser.add_argument(
        "--test-keys", type=int, default=1000, help="retail test seeds whose task keys are read"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/derived_conformity.json")
    parser.add_argument("--table", action="store_true", help="only print the table of --json")
    args = parser.parse_args()
    envs: list[tuple[str, Any, str]] = []
    if args.only != "retail":
        envs += [
            (f"bfcl/{c}", DerivedCapabilityEnv(target_id=BFCL, capability=c), BFCL) for c in BFCL_CAPABILITIES
        ]
    if args.only != "bfcl":
        envs += [
            (f"retail/{c}", DerivedCapabilityEnv(target_id=RETAIL, capability=c), RETAIL)
            for c in RETAIL_CAPABILITIES
        ]
    results: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    keys: dict[str, set[str]] = {}
    for name, env, target_id in [] if args.table else envs:
        if target_id not in keys:
            keys[target_id] = test_keys(make_target(env), target_id, args.test_keys)
        results[name] = measure(env, args.seeds, keys[target_id])
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(name, json.dumps(results[name]), flush=True)
    print(
        "\n| env | system prompt identical | tools identical (count) | user simulator | observation identical "
        "| replay 1.0 | episodes authenticated | writes confirmed with details | writes with ids never shown "
        "| sources in target test |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in results:
        print(row(name, results[name], name.startswith("retail/")))


if __name__ == "__main__":
    main()

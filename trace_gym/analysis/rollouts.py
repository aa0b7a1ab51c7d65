"""``trace rollout``: base-agent trajectories on a target's train split, one JSONL line per finished episode.

Agents (``--model``):

* a local transformers model or an alias such as ``smollm2-135m`` (``trace_train.models``): episodes run in
  batches of ``--batch-size`` through the trainer's rollout engine (``trace_train.rollout.collect``), one
  batched generate call per turn; a batch's lines are written when the batch ends;
* a model behind an OpenAI-compatible server (``--base-url``, key from ``$OPENAI_API_KEY``): up to
  ``--batch-size`` episodes in flight, requests of one turn sent concurrently, each line written the moment its
  episode ends and the slot refilled with the next seed;
* scripted agents, for checking the analysis itself: ``oracle`` replays ``env.unwrapped.oracle_actions()``;
  ``oracle-without:CAPABILITY`` replays ``oracle_actions(without=CAPABILITY)``, the oracle with exactly that
  capability removed (targets that implement it list ``env.unwrapped.ablatable_capabilities``).

Resume: every line is flushed and fsynced as it is written, so a killed run keeps every finished episode (a
line cut by the kill is dropped on resume). ``--resume`` reads the file, checks that it was made by the same
env, model, split and settings, and runs only the seeds not yet in it: no seed is ever written twice.

Analysis never sees the test split: ``--split test`` is refused, and so is a file holding test-split lines.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

TRAJECTORIES = "trajectories.jsonl"
ORACLE = "oracle"
ORACLE_WITHOUT = "oracle-without:"
# settings that must match between a run and its --resume (anything else may change, e.g. the batch size)
RESUME_KEYS = ("env_id", "split", "model", "adapter", "difficulty", "max_turns", "sampling", "seed_offset")


class RolloutError(ValueError):
    """Bad arguments or a file that cannot be continued; the message says which and why."""


class SplitRefusedError(RolloutError):
    """The analysis was asked to look at test-split tasks."""


def refuse_test_split(split: str, what: str = "trace rollout") -> None:
    """Raise :class:`SplitRefusedError` unless ``split`` is the train split."""
    guard = _shared_guard()
    if guard is not None:
        guard(split)
    if split != "train":
        raise SplitRefusedError(
            f"{what} works on the train split only, got split={split!r}: capability analysis must never "
            "see test-split tasks (they are the held-out evaluation set of the trained agent)"
        )


def _shared_guard() -> Callable[[str], None] | None:
    """The training commands' own test-split guard, where ``trace_train.envs`` provides one."""
    try:
        from trace_train import envs
    except ImportError:
        return None
    guard = getattr(envs, "refuse_test_split", None)
    return guard if callable(guard) else None


@dataclass
class RolloutArgs:
    """Arguments of ``trace rollout`` (flags of the same names)."""

    env_id: str
    model: str
    out: str
    episodes: int = 64
    split: str = "train"
    seed_offset: int = 0
    max_turns: int = 20
    batch_size: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_total_tokens: int = (
        32768  # local engine: a conversation longer than this is cut (and scored as it stands)
    )
    difficulty: int | None = None
    engine: str | None = None  # local models: the trainer's engine ("cached" or "simple"; default its own)
    base_url: str | None = None
    adapter: str | None = None
    dtype: str = "float32"
    resume: bool = False
    sampling_seed: int | None = None

    def sampling(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.sampling_seed,
        }


@dataclass
class RolloutSummary:
    path: str
    written: int
    skipped: int  # seeds already in the file (resume)
    passed: int
    seconds: float


# ---- the JSONL file ---------------------------------------------------------------------------------------------
def read_trajectories(path: str | os.PathLike, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete line of a trajectory file. A last line without its newline (a run killed mid-write)
    is ignored, and with ``repair=True`` cut off the file so appending continues cleanly. Any other bad line
    raises :class:`RolloutError` naming the line (nothing is dropped silently)."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data) and repair:
        with path.open("r+b") as f:
            f.truncate(complete)
    records = []
    for number, line in enumerate(data[:complete].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise RolloutError(f"{path}:{number} is not a JSON line ({err})") from None
        if not isinstance(record, dict) or "seed" not in record or "reward" not in record:
            raise RolloutError(f"{path}:{number} is not a trajectory record (needs seed and reward)")
        record["_line"] = number
        records.append(record)
    return records


class JsonlWriter:
    """Appends one record per line, flushed and fsynced so a killed run keeps every finished line."""

    def __init__(self, path: Path):
        self.path = path
        self.file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


# ---- agents ---------------------------------------------------------------------------------------------------
class TextAgent:
    """An agent of the text-level loop: ``begin`` is told each new episode, ``act`` answers active slots."""

    name = "agent"

    def begin(self, slot: int, env: gym.Env) -> None:
        """A new episode started in ``slot`` (after ``env.reset``)."""

    def act(self, slots: list[int], conversations: list[list[dict]], tools: list[list[dict]]) -> list[Any]:
        raise NotImplementedError


class PolicyAgent(TextAgent):
    """Any :class:`trace_train.policies.base.Policy` (e.g. the OpenAI-compatible HTTP policy)."""

    def __init__(self, policy: Any, sampling: Any):
        self.policy, self.sampling, self.name = policy, sampling, getattr(policy, "name", "policy")

    def act(self, slots, conversations, tools):
        return self.policy.act(conversations, tools, self.sampling)


class ScriptedAgent(TextAgent):
    """Replays the env's oracle, or the oracle with one capability removed (``without``)."""

    def __init__(self, without: str | None = None):
        self.without = without
        self.name = ORACLE if without is None else ORACLE_WITHOUT + without
        self.scripts: dict[int, list[Any]] = {}
        self.turns: dict[int, int] = {}

    def begin(self, slot: int, env: gym.Env) -> None:
        unwrapped = env.unwrapped
        if self.without is None:
            script = unwrapped.oracle_actions()
        else:
            known = getattr(unwrapped, "ablatable_capabilities", None)
            if not known:  # absent, or declared empty (the env can remove nothing)
                raise RolloutError(
                    f"{unwrapped.spec.id if unwrapped.spec else type(unwrapped).__name__} cannot remove a "
                    "capability from its oracle (no ablatable_capabilities / oracle_actions(without=...)); "
                    "use a target that supports it, e.g. trace/retail-v1"
                )
            if self.without not in known:
                raise RolloutError(
                    f"cannot remove {self.without!r} from the oracle; this env can remove: {', '.join(known)}"
                )
            script = unwrapped.oracle_actions(without=self.without)
        self.scripts[slot], self.turns[slot] = list(script), 0

    def act(self, slots, conversations, tools):
        out = []
        for slot in slots:
            script, turn = self.scripts[slot], self.turns[slot]
            # past the end of the script: an empty reply (the user then ends or the turn limit does)
            out.append(script[turn] if turn < len(script) else {"content": ""})
            self.turns[slot] = turn + 1
        return out


def scripted_agent(model: str) -> ScriptedAgent | None:
    """The scripted agent ``model`` names (``oracle``, ``oracle-without:CAP``), else None."""
    if model == ORACLE:
        return ScriptedAgent()
    if model.startswith(ORACLE_WITHOUT):
        capability = model[len(ORACLE_WITHOUT) :]
        if not capability:
            raise RolloutError(
                "oracle-without: needs a capability name, e.g. oracle-without:policy-adherence"
            )
        return ScriptedAgent(capability)
    return None


# ---- the run ------------------------------------------------------------------------------------------------------
def _make_env(env_id: str, max_turns: int | None = None) -> gym.Env:
    """The env, with its own turn limit set to ``max_turns`` where it takes one, so an episode cut by the
    limit is still scored and labelled by the env (trace's chat envs report requirements on truncation)."""
    import trace_gym  # noqa: F401 - registers the built-in envs and plugins

    try:
        from trace_train.envs import make_env
    except ImportError:  # the env-only install: same effect, without the trainer

        def make_env(env_id: str, **kwargs: Any) -> gym.Env:
            return gym.make(env_id, disable_env_checker=True, **kwargs)

    if max_turns is not None:
        try:
            return make_env(env_id, max_turns=max_turns)
        except TypeError:  # an env without a max_turns argument: the rollout loop's own limit applies
            pass
    return make_env(env_id)


def _reset_seed(split: str, index: int, env: gym.Env) -> int:
    try:
        from trace_train.envs import reset_seed
    except ImportError:
        return index
    return reset_seed(split, index, env)


def run_header(args: RolloutArgs) -> dict[str, Any]:
    return {
        "env_id": args.env_id,
        "split": args.split,
        "model": args.model,
        "adapter": args.adapter,
        "difficulty": args.difficulty,
        "max_turns": args.max_turns,
        "sampling": args.sampling(),
        "seed_offset": args.seed_offset,
    }


def _check_resumable(existing: list[dict[str, Any]], header: dict[str, Any], path: Path) -> None:
    for record in existing:
        if record.get("split") != "train":
            raise SplitRefusedError(
                f"{path}:{record['_line']} holds a {record.get('split')!r}-split trajectory"
            )
        run = record.get("run") or {}
        diff = [k for k in RESUME_KEYS if run.get(k) != header[k]]
        if diff:
            changes = ", ".join(f"{k}: file {run.get(k)!r} vs now {header[k]!r}" for k in diff)
            raise RolloutError(
                f"--resume: {path} was written with other settings ({changes}); resume with the same "
                "settings or write to another --out"
            )


def rollout(args: RolloutArgs, progress: Callable[[int, int], None] | None = None) -> RolloutSummary:
    """Run ``args.episodes`` episodes (minus those already in the file with ``resume``); see the module doc."""
    refuse_test_split(args.split)
    if args.episodes < 1:
        raise RolloutError(f"--episodes must be >= 1, got {args.episodes}")
    if args.max_turns < 1 or args.batch_size < 1:
        raise RolloutError("--max-turns and --batch-size must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / TRAJECTORIES
    header = run_header(args)
    existing = read_trajectories(path, repair=args.resume)
    if existing and not args.resume:
        raise RolloutError(
            f"{path} already holds {len(existing)} trajectories; pass --resume to continue it, "
            "or choose another --out"
        )
    _check_resumable(existing, header, path)
    done = {int(r["seed"]) for r in existing}

    probe = _make_env(args.env_id)
    seeds = [_reset_seed(args.split, args.seed_offset + i, probe) for i in range(args.episodes)]
    probe.close()
    todo = [s for s in seeds if s not in done]
    summary = RolloutSummary(str(path), 0, len(seeds) - len(todo), 0, 0.0)
    start = time.perf_counter()
    writer = JsonlWriter(path)
    try:
        for record in _episodes(args, todo, header):
            writer.write(record)
            summary.written += 1
            summary.passed += int(record["success"])
            if progress:
                progress(summary.written, len(todo))
    finally:
        writer.close()
    summary.seconds = time.perf_counter() - start
    (out / "rollout.json").write_text(json.dumps({**header, "episodes": args.episodes}, indent=2) + "\n")
    return summary


def _episodes(args: RolloutArgs, seeds: Sequence[int], header: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if not seeds:
        return
    agent = scripted_agent(args.model)
    if agent is not None:
        yield from _text_loop(args, seeds, header, agent)
        return
    from trace_train.policies.base import SamplingConfig

    sampling = SamplingConfig(
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.sampling_seed,
    )
    if args.base_url:
        from trace_train.policies.openai_http import OpenAIHTTPPolicy

        policy = OpenAIHTTPPolicy(model=args.model, base_url=args.base_url, lora_name=args.adapter)
        yield from _text_loop(args, seeds, header, PolicyAgent(policy, sampling))
        return
    yield from _engine_batches(args, seeds, header, sampling)


def _record(
    args: RolloutArgs,
    header: dict[str, Any],
    *,
    seed: int,
    messages: list[dict],
    tools: list[dict],
    reward: float,
    info: dict[str, Any],
    turns: int,
    terminated: bool,
    truncated: bool,
    invalid_actions: int,
    seconds: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "env_id": args.env_id,
        "split": args.split,
        "seed": seed,
        "model": args.model,
        "reward": float(reward),
        "success": float(reward) >= 1.0,
        "reward_components": info.get("reward_components"),
        "requirements": info.get("requirements"),
        "turns": turns,
        "terminated": terminated,
        "truncated": truncated,
        "invalid_actions": invalid_actions,
        "messages": messages,
        "tools": tools,
        "timing": {"seconds": round(seconds, 4), "finished_at": time.time()},
        "run": header,
        **(extra or {}),
    }


def _tools(env: gym.Env, info: dict[str, Any]) -> list[dict]:
    return list(info.get("tools") or getattr(env.unwrapped, "tools", None) or [])


def _conversation(obs: Any) -> list[dict]:
    if isinstance(obs, str):
        return [{"role": "user", "content": obs}]
    return [dict(m) for m in obs]


def _options(args: RolloutArgs) -> dict[str, Any]:
    options: dict[str, Any] = {"split": args.split}
    if args.difficulty is not None:
        options["difficulty"] = args.difficulty
    return options


def _text_loop(
    args: RolloutArgs, seeds: Sequence[int], header: dict[str, Any], agent: TextAgent
) -> Iterator[dict[str, Any]]:
    """Up to ``batch_size`` episodes in flight; a finished episode is yielded at once and its slot refilled."""
    queue = list(seeds)
    envs = [_make_env(args.env_id, args.max_turns) for _ in range(min(args.batch_size, len(queue)))]
    slots: dict[int, dict[str, Any]] = {}

    def start(slot: int) -> None:
        seed = queue.pop(0)
        env = envs[slot]
        obs, info = env.reset(seed=seed, options=_options(args))
        agent.begin(slot, env)
        slots[slot] = {
            "seed": seed,
            "messages": _conversation(obs),
            "tools": _tools(env, info),
            "turns": 0,
            "invalid": 0,
            "t0": time.perf_counter(),
        }

    try:
        for slot in range(len(envs)):
            start(slot)
        while slots:
            active = sorted(slots)
            actions = agent.act(
                active, [slots[s]["messages"] for s in active], [slots[s]["tools"] for s in active]
            )
            for slot, action in zip(active, actions, strict=True):
                state = slots[slot]
                obs, reward, terminated, truncated, info = envs[slot].step(action)
                state["turns"] += 1
                state["invalid"] += int(bool(info.get("invalid_action")))
                if isinstance(obs, str):
                    text = action if isinstance(action, str) else json.dumps(action)
                    state["messages"] += [
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": obs},
                    ]
                else:
                    state["messages"] = _conversation(obs)
                out_of_turns = state["turns"] >= args.max_turns
                if terminated or truncated or out_of_turns:
                    yield _record(
                        args,
                        header,
                        seed=state["seed"],
                        messages=state["messages"],
                        tools=state["tools"],
                        reward=float(reward),
                        info=info,
                        turns=state["turns"],
                        terminated=bool(terminated),
                        truncated=bool(truncated) or (out_of_turns and not terminated),
                        invalid_actions=state["invalid"],
                        seconds=time.perf_counter() - state["t0"],
                    )
                    del slots[slot]
                    if queue:
                        start(slot)
    finally:
        for env in envs:
            env.close()


def _engine_batches(
    args: RolloutArgs, seeds: Sequence[int], header: dict[str, Any], sampling: Any
) -> Iterator[dict[str, Any]]:
    """Local models: the trainer's engine, continuously batched (``batch_size`` episodes at once; a finished
    episode's slot starts the next seed), records yielded every ``4 * batch_size`` episodes."""
    from trace_train.policies.hf import HFPolicy
    from trace_train.rollout import ResetSpec, stream_collect

    policy = HFPolicy.from_pretrained(args.model, adapter=args.adapter, dtype=args.dtype)
    envs = [_make_env(args.env_id, args.max_turns) for _ in range(min(args.batch_size, len(seeds)))]
    span = 4 * args.batch_size
    try:
        for b in range(0, len(seeds), span):
            chunk = seeds[b : b + span]
            specs = [
                ResetSpec(seed=s, group=i, split=args.split, difficulty=args.difficulty)
                for i, s in enumerate(chunk)
            ]
            cuts: dict[int, Any] = {}
            tools: dict[int, list[Any]] = {}

            def finished(i: int, traj: Any, env: Any, cuts=cuts, tools=tools) -> None:
                # read from the env before it is reused: its tools and, when the engine cut the episode (token
                # budget) before the env ended it, its score as it stands (as the env scores a turn-limit cut)
                tools[i] = list(getattr(env.unwrapped, "tools", None) or [])
                if "requirements" not in traj.info and callable(getattr(env.unwrapped, "_evaluate", None)):
                    cuts[i] = env.unwrapped._evaluate()

            t0 = time.perf_counter()
            trajs = stream_collect(
                policy,
                envs,
                specs,
                sampling,
                max_turns=args.max_turns,
                max_total_tokens=args.max_total_tokens,
                on_finish=finished,
                **({"engine": args.engine} if args.engine else {}),
            )
            seconds = time.perf_counter() - t0
            for i, traj in enumerate(trajs):
                info, cut = traj.info, None
                if i in cuts:
                    info = {
                        "reward_components": dict(cuts[i].components),
                        "requirements": dict(cuts[i].requirements),
                    }
                    traj.reward, cut = float(cuts[i].reward), "max_total_tokens"
                yield _record(
                    args,
                    header,
                    seed=traj.spec.seed,
                    messages=traj.messages,
                    tools=tools[i],
                    reward=traj.reward,
                    info=info,
                    turns=traj.turns,
                    terminated=traj.terminated,
                    truncated=traj.truncated,
                    invalid_actions=traj.invalid_actions,
                    seconds=seconds,
                    extra={
                        "generated_tokens": traj.generated_tokens,
                        "batch_seconds": round(seconds, 4),
                        "cut": cut,
                    },
                )
    finally:
        for env in envs:
            env.close()

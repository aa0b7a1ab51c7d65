"""Throughput of `trace env-serve`: whole episodes (sessions) per second over HTTP, against the same episodes
played in-process in the same run.

A real server process (``python -m trace_train.cli env-serve``) on localhost; ``C`` client threads, each with its
own :class:`~trace_gym.interop.client.RemoteEnv`, play the oracle of one seed per episode (open session, reset,
every oracle step, close). The reference solutions are computed before the clock starts. The baseline is the
same episodes on a local ``gym.make`` env in one thread.

    python benchmarks/bench_env_server.py                          # retail-v2, 1/8/64 clients, 128 episodes
    python benchmarks/bench_env_server.py --clients 1 64 --episodes 256
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import threading
import time

import gymnasium as gym

import trace_gym  # noqa: F401 - registers the envs
from trace_gym.interop.client import RemoteEnv

REPO = pathlib.Path(__file__).resolve().parents[1]


def plans(env_id: str, seeds: range) -> dict[int, list]:
    env = gym.make(env_id)
    out = {}
    for seed in seeds:
        env.reset(seed=seed)
        out[seed] = env.unwrapped.oracle_actions()
    return out


def local(env_id: str, oracle: dict[int, list]) -> tuple[float, int]:
    env = gym.make(env_id)
    steps = 0
    start = time.perf_counter()
    for seed, actions in oracle.items():
        env.reset(seed=seed)
        for action in actions:
            env.step(action)
            steps += 1
    return time.perf_counter() - start, steps


def remote(url: str, oracle: dict[int, list], clients: int) -> tuple[float, int, list[float]]:
    seeds = list(oracle)
    rewards: list[float] = []
    lock = threading.Lock()
    steps = [0]

    def worker(mine: list[int]) -> None:
        for seed in mine:
            env = RemoteEnv(url)
            env.reset(seed=seed)
            reward = 0.0
            for action in oracle[seed]:
                _, reward, *_ = env.step(action)
            env.close()
            with lock:
                rewards.append(reward)
                steps[0] += len(oracle[seed])

    threads = [threading.Thread(target=worker, args=(seeds[i::clients],)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, steps[0], rewards


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="trace/retail-v2")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--episodes", type=int, default=128)
    args = parser.parse_args()

    oracle = plans(args.env, range(args.episodes))
    base_s, base_steps = local(args.env, oracle)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trace_train.cli",
            "env-serve",
            args.env,
            "--port",
            "0",
            "--max-sessions",
            "1024",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        url = server.stdout.readline().strip().rsplit(" on ", 1)[1]
        print(f"{args.env}: {args.episodes} oracle episodes, {base_steps} steps; {os.cpu_count()} CPUs")
        print(f"{'mode':<22}{'seconds':>9}{'sessions/s':>12}{'steps/s':>10}{'vs local':>10}")
        print(
            f"{'in-process (baseline)':<22}{base_s:>9.2f}{args.episodes / base_s:>12.1f}{base_steps / base_s:>10.0f}{1.0:>10.2f}"
        )
        for clients in args.clients:
            seconds, steps, rewards = remote(url, oracle, clients)
            assert len(rewards) == args.episodes and min(rewards) == 1.0, "an oracle episode failed over HTTP"
            rate = args.episodes / seconds
            print(
                f"{f'HTTP, {clients} clients':<22}{seconds:>9.2f}{rate:>12.1f}{steps / seconds:>10.0f}{base_s / seconds:>10.2f}"
            )
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()

"""`trace env-serve` as a real server process on localhost, driven by RemoteEnv and raw HTTP."""

import http.client
import json
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from tests.interop.ids import RETAIL
from tests.interop.servers import REPO, ServerProcess
from trace_gym.interop.client import EnvServerClient, RemoteEnv, RemoteEnvError

ENV_ID = RETAIL
TIMEOUT = 3.0  # session idle timeout of the reaping server (seconds; slow test only)


@pytest.fixture(scope="module")
def server():
    proc = ServerProcess(
        "env-serve", ENV_ID, "--port", "0", "--session-timeout", "120", "--max-sessions", "100"
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def small_server():
    """Two sessions at most, closed after TIMEOUT seconds idle."""
    proc = ServerProcess(
        "env-serve", ENV_ID, "--port", "0", "--session-timeout", str(TIMEOUT), "--max-sessions", "2"
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def limited_server():
    """Two sessions at most, never idle long enough to expire during a test (however loaded the machine)."""
    proc = ServerProcess(
        "env-serve", ENV_ID, "--port", "0", "--session-timeout", "3600", "--max-sessions", "2"
    )
    yield proc
    proc.stop()


def health(url: str) -> dict:
    return EnvServerClient(url).request("GET", "/health")


def raw(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    parts = urlparse(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    payload = json.loads(response.read())
    conn.close()
    return response.status, payload


def oracle(seed: int) -> list:
    env = gym.make(ENV_ID)
    env.reset(seed=seed)
    return env.unwrapped.oracle_actions()


def test_remote_env_matches_local_env_and_passes_check_env(server):
    remote, local = RemoteEnv(server.url), gym.make(ENV_ID)
    try:
        obs_r, info_r = remote.reset(seed=3)
        obs_l, info_l = local.reset(seed=3)
        assert obs_r == obs_l and info_r["tools"] == info_l["tools"]
        for action in local.unwrapped.oracle_actions():
            step_r, step_l = remote.step(action), local.step(action)
            assert step_r[:4] == step_l[:4]
        assert step_r[1] == 1.0 and step_r[2]
        state = remote.state()
        assert state["done"] and state["step_count"] == len(local.unwrapped.oracle_actions())
        check_env(remote, skip_render_check=True)
    finally:
        remote.close()


def test_64_concurrent_sessions_each_solve_their_episode(server):
    n = 64
    plans = {i: oracle(100 + i) for i in range(n)}
    all_open = threading.Barrier(n + 1, timeout=120)
    release = threading.Event()
    rewards: dict[int, float] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        env = RemoteEnv(server.url)
        try:
            env.reset(seed=100 + i)
            all_open.wait()
            release.wait(120)
            reward = 0.0
            for action in plans[i]:
                _, reward, _, _, _ = env.step(action)
            rewards[i] = reward
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)
        finally:
            env.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    before = health(server.url)["sessions"]
    for thread in threads:
        thread.start()
    all_open.wait()
    assert health(server.url)["sessions"] == before + n  # all 64 open at once
    release.set()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[:3]
    assert rewards == dict.fromkeys(range(n), 1.0)
    assert health(server.url)["sessions"] == before  # closed by the clients


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "kind"),
    [
        ("POST", "/step", b"{not json", 400, "invalid_json"),
        ("POST", "/step", b"[1, 2]", 400, "invalid_request"),
        ("POST", "/step", b"", 400, "invalid_request"),
        ("POST", "/step", b'{"session_id": 7, "action": "hi"}', 400, "invalid_request"),
        ("POST", "/step", b'{"session_id": "nope", "action": "hi"}', 404, "unknown_session"),
        ("POST", "/reset", b'{"seed": "one"}', 400, "invalid_request"),
        ("POST", "/reset", b'{"seed": -1}', 400, "invalid_request"),
        ("POST", "/reset", b'{"options": {"split": "nonsense"}}', 400, "invalid_request"),
        ("POST", "/reset", b'{"options": [1]}', 400, "invalid_request"),
        ("GET", "/state", None, 400, "invalid_request"),
        ("GET", "/nope", None, 404, "not_found"),
        ("POST", "/close", b'{"session_id": "nope"}', 404, "unknown_session"),
    ],
)
def test_malformed_requests_get_clear_errors(server, method, path, body, status, kind):
    got_status, payload = raw(server.url, method, path, body)
    assert got_status == status and payload["error"]["type"] == kind
    assert len(payload["error"]["message"]) > 10
    assert health(server.url)["status"] == "ok"  # and the server keeps serving


def test_step_without_action_and_after_the_end(server):
    env = RemoteEnv(server.url)
    try:
        env.reset(seed=5)
        with pytest.raises(RemoteEnvError, match="'action' is required"):
            env.client.request("POST", "/step", {"session_id": env.session_id})
        for action in oracle(5):
            env.step(action)
        with pytest.raises(RemoteEnvError) as err:
            env.step("hello again")
        assert err.value.status == 409 and err.value.kind == "episode_over"
        env.step  # noqa: B018 - the session survives the refused step
        obs, _ = env.reset(seed=6)
        assert obs[0]["role"] == "system"
    finally:
        env.close()


def test_ill_typed_actions_are_400_and_use_up_no_turn(server):
    env = RemoteEnv(server.url)
    try:
        env.reset(seed=5)
        bad = [
            5,
            None,
            [1, 2],
            {"name": "x"},
            {"content": 3},
            {"tool_calls": "get_order"},
            {"tool_calls": [1]},
        ]
        for action in bad:
            with pytest.raises(RemoteEnvError) as err:
                env.client.request("POST", "/step", {"session_id": env.session_id, "action": action})
            assert err.value.status == 400 and "'action" in str(err.value), action
        total = 0.0
        for action in oracle(5):  # the refused steps took no turn: the oracle still solves the task
            _, reward, terminated, truncated, _ = env.step(action)
            total += reward
        assert terminated and total > 0
    finally:
        env.close()


@pytest.mark.slow  # waits on the wall clock (the idle timeout); the fast suite tests the pool on a fake clock
def test_killed_client_session_is_reaped(small_server):
    server = small_server
    script = (
        "import sys; from trace_gym.interop.client import RemoteEnv\n"
        f"env = RemoteEnv({server.url!r}); env.reset(seed=1); env.step('hello')\n"
        "print(env.session_id, flush=True); import time; time.sleep(600)\n"
    )
    client = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    session_id = client.stdout.readline().strip()
    assert session_id
    status, state = raw(server.url, "GET", f"/state?session_id={session_id}")
    assert status == 200 and state["step_count"] == 1
    client.kill()
    client.wait()
    client.stdout.close()
    deadline = time.monotonic() + TIMEOUT + 120  # generous: only a server that never reaps fails
    while time.monotonic() < deadline:
        status, _ = raw(server.url, "GET", f"/state?session_id={session_id}")
        if status == 404:
            break
        time.sleep(0.2)
    assert status == 404
    assert health(server.url)["reaped"] >= 1


def test_session_limit_answers_503(limited_server):
    """The limit, on a server whose sessions cannot expire mid-test (a 3 s idle timeout on a loaded machine
    reaped session 0 before the third reset, which then succeeded)."""
    envs = [RemoteEnv(limited_server.url) for _ in range(3)]
    envs[0].reset(seed=0)
    envs[1].reset(seed=1)
    with pytest.raises(RemoteEnvError) as err:
        envs[2].reset(seed=2)
    assert err.value.status == 503 and "--max-sessions" in str(err.value)
    envs[0].close()
    envs[2].reset(seed=2)  # a closed session frees its place
    for env in envs:
        env.close()


def test_unknown_env_id_fails_at_start():
    with pytest.raises(RuntimeError, match="unknown env id"):
        ServerProcess("env-serve", "trace/no-such-env-v0", "--port", "0")


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_session_pool_reaps_idle_sessions_by_its_clock(monkeypatch):
    """Reaping without waiting: the pool on a fake clock closes exactly the sessions idle past the timeout."""
    from trace_gym.interop import server as server_module

    clock = FakeClock()
    monkeypatch.setattr(server_module.time, "monotonic", clock)
    closed: list[str] = []

    class Env:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    names = iter("abc")
    pool = server_module.SessionPool(lambda: Env(next(names)), max_sessions=3, timeout=10.0)
    (idle, _), (busy, _) = pool.open(), pool.open()
    pool.get(idle), pool.get(busy)  # activity at the fake clock's time
    clock.now += 6
    pool.get(busy)  # touched: idle for 6 s only
    clock.now += 6
    assert pool.reap() == 1 and pool.reaped == 1 and closed == ["a"]
    with pytest.raises(server_module.RequestError) as err:
        pool.get(idle)
    assert err.value.status == 404
    assert pool.get(busy) is not None
    clock.now += 9.9
    assert pool.reap() == 0  # not past the timeout yet
    clock.now += 0.2
    assert pool.reap() == 1 and closed == ["a", "b"]

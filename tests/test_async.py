"""The async runner: it reproduces the sync runner with lag 0, reproduces itself in deterministic
mode, bounds memory and staleness when free-running, learns, fails and stops cleanly.

Compiled programs are shared between runs of the same config (``reuse_compiled``); every
concurrency test has a timeout (a hang, like the XLA:CPU batched-QR deadlock, fails fast)."""

import _thread
import dataclasses
import gc
import threading
import time
import traceback

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async import runners
from jaxrl_async.cli.command import config_from_args, train_parser
from jaxrl_async.run.sinks import final_return
from jaxrl_async.runners import actor_learner, placement
from jaxrl_async.runners.state import Callbacks
from tests.conftest import async_ppo, compile_once, no_threads_left, runner_threads

SMALL = dict(env="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2, update_epochs=2,
             total_timesteps=8 * 16 * 8, log_every=3, fast_compile=True)
HOST_METRICS = {"actor_busy", "learner_busy", "queue_depth", "dropped_batches"}


def ppo(runner: dict, **kw) -> jra.PPOConfig:
    return async_ppo(SMALL, runner, **kw)


@pytest.fixture(scope="module", autouse=True)
def reuse_compiled():
    """Compile once per config and device layout in this module: the programs depend on the
    runner only through where the actors and learners are, not on its schedule."""

    def key(cfg, env, algo, where):
        r = cfg.runner
        layout_only = jra.AsyncConfig(actor_devices=r.actor_devices,
                                      learner_devices=r.learner_devices,
                                      actors_per_device=r.actors_per_device)
        return (dataclasses.replace(cfg, runner=layout_only), tuple(where.actor_devices),
                tuple(where.learner_devices))

    yield from compile_once(actor_learner, "compile_programs", key)


def assert_same_run(a, b, rtol=0.0, atol=0.0, names=None):
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)
    for name in names or set(a.metrics) - HOST_METRICS:
        np.testing.assert_allclose(a.metrics[name], b.metrics[name], rtol=rtol, atol=atol,
                                   err_msg=name)


# --------------------------------------------------------------------------- reproducibility
@pytest.fixture(scope="module")
def sync_run():
    return jra.train(jra.PPOConfig(**SMALL), seed=3, progress=False)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner, devices", [
    (dict(lag=0, max_staleness=0), 1),  # one device playing both roles
    (dict(lag=0, max_staleness=0, actors_per_device=2, learner_devices=2), 3),
], ids=["shared-device", "2-streams-2-learners"])
def test_lag_0_reproduces_the_sync_runner(sync_run, runner, devices):
    out = runners.run(ppo(runner), jax.random.key(3), devices=jax.local_devices()[:devices])
    assert_same_run(sync_run, out, rtol=1e-5, atol=1e-6, names=sync_run.metrics)
    np.testing.assert_allclose(sync_run.state.env.obs, out.state.env.obs, rtol=1e-5, atol=1e-6)
    assert int(out.state.update) == sync_run.metrics["env_steps"].size
    assert np.all(out.metrics["staleness_max"] == 0)


@pytest.mark.timeout(300)
def test_deterministic_mode_reproduces_a_run_exactly():
    # 2 actor streams, 2 learner devices, lag 1, params pushed every 2 updates
    cfg = ppo(dict(actors_per_device=2, learner_devices=2, lag=1, sync_every=2, max_staleness=2))
    one, two = (runners.run(cfg, jax.random.key(5), devices=jax.local_devices()[:3])
                for _ in range(2))
    assert_same_run(one, two)  # bit for bit
    # rollout k acts with the params of update k - 1, as pushed every 2 updates
    np.testing.assert_array_equal(one.metrics["staleness"], [0, 1, 2, 1, 2, 1, 2, 1])
    assert one.timing["env_steps_collected"] == cfg.num_updates * cfg.steps_per_update


# --------------------------------------------------------------------------- free-running
class LiveBuffers(Callbacks):
    """How many device arrays are alive at every metrics delivery."""

    def __init__(self):
        self.counts = []

    def on_metrics(self, first_update, rows):
        self.counts.append(len(jax.live_arrays()))


LONG = dict(total_timesteps=8 * 16 * 600, log_every=10)  # 600 updates


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stale_policy, max_staleness", [("drop", 0), ("correct", 1)])
def test_free_running_bounds_memory_and_staleness(stale_policy, max_staleness):
    cfg = ppo(dict(deterministic=False, lag=0, actors_per_device=2, queue_size=3,
                   max_staleness=max_staleness, stale_policy=stale_policy), **LONG)
    live = LiveBuffers()
    out = runners.run(cfg, jax.random.key(0), live)
    assert out.timing["max_outstanding"] <= cfg.runner.queue_size
    assert out.metrics["staleness_max"].max() <= max_staleness
    assert out.metrics["episode_return"].size == cfg.num_updates
    # No growth over a long run: the count moves with what is in flight (up to ~40 arrays), a
    # leak of one array per update would add ~400 between the first and last third.
    third = len(live.counts) // 3
    assert np.median(live.counts[-third:]) <= np.median(live.counts[:third]) + 15, live.counts
    dropped = out.metrics["dropped_batches"][-1]
    if stale_policy == "correct":
        assert dropped == 0  # the actors waited instead
    else:  # actors that ran ahead with params one update old saw their batch dropped
        assert dropped > 0
    # Counted on both sides of the queue: the actors' rollouts against the learner's takes.
    # Every batch taken was collected; at most queue_size more were collected and not taken.
    collected, trained = out.timing["env_steps_collected"], out.timing["env_steps_trained"]
    per_batch = cfg.steps_per_update // cfg.runner.num_streams
    assert collected >= trained + dropped * per_batch
    assert collected <= trained + (dropped + cfg.runner.queue_size) * per_batch
    assert trained == int(out.state.update) * cfg.steps_per_update
    # sps counts the steps trained on, sps_collected all the actors stepped (dropped included)
    assert out.timing["sps"] == pytest.approx(trained / out.timing["train_s"])
    assert out.timing["sps_collected"] == pytest.approx(collected / out.timing["train_s"])


# --------------------------------------------------------------------------- failure
class Boom(RuntimeError):
    pass


def failing(fn, after: int, raised_at: list):
    """``fn``, except that its call number ``after`` raises ``Boom``."""
    calls = []

    def step(*args):
        calls.append(1)
        if len(calls) == after:
            raised_at.append(time.perf_counter())
            raise Boom("injected")
        return fn(*args)

    return step


@pytest.mark.timeout(120)
@pytest.mark.parametrize("role", ["actor", "learner"])
def test_an_exception_in_a_thread_reaches_the_caller(monkeypatch, role):
    cfg = ppo(dict(actors_per_device=2), **LONG)
    compile_programs, raised_at = actor_learner.compile_programs, []

    def with_failure(*args):
        programs = compile_programs(*args)
        if role == "actor":
            return programs._replace(actor=[failing(programs.actor[0], 4, raised_at)])
        return programs._replace(learner=failing(programs.learner, 4, raised_at))

    monkeypatch.setattr(actor_learner, "compile_programs", with_failure)
    key = jax.random.key(0)
    actor_learner.prepare(cfg, key)  # compiled (and cached) before counting buffers
    gc.collect()
    threads_before, buffers_before = set(threading.enumerate()), len(jax.live_arrays())
    with pytest.raises(Boom) as error:
        runners.run(cfg, key)
    assert time.perf_counter() - raised_at[0] < 3.0
    text = "".join(traceback.format_tb(error.value.__traceback__))
    assert "in step" in text and f"{role}_loop" in text  # the original traceback
    assert no_threads_left(threads_before)
    gc.collect()
    assert len(jax.live_arrays()) <= buffers_before  # while the exception is still held


class InterruptAtFirstMetrics(Callbacks):
    def on_metrics(self, first_update, rows):
        _thread.interrupt_main()  # as Ctrl-C does; raised in the caller's thread right after


@pytest.mark.timeout(120)
def test_ctrl_c_stops_every_thread():
    cfg = ppo(dict(actors_per_device=2), **LONG)
    with pytest.raises(KeyboardInterrupt):
        runners.run(cfg, jax.random.key(0), InterruptAtFirstMetrics())
    assert runner_threads() == []


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("kwargs, field", [
    (dict(learner_devices=0), "AsyncConfig.learner_devices"),
    (dict(actor_devices=-1), "AsyncConfig.actor_devices"),
    (dict(lag=2), "AsyncConfig.lag"),
    (dict(lag=1, max_staleness=0), "AsyncConfig.max_staleness"),
    (dict(sync_every=4, max_staleness=2), "AsyncConfig.max_staleness"),
    (dict(queue_size=0), "AsyncConfig.queue_size"),
    (dict(stale_policy="keep"), "AsyncConfig.stale_policy"),
])
def test_bad_runner_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        jra.AsyncConfig(**kwargs)


def test_envs_must_split_over_streams_and_learner_devices():
    with pytest.raises(ValueError, match=r"PPOConfig.num_envs must be divisible by .* = 4"):
        ppo(dict(actors_per_device=2, learner_devices=2), num_envs=6)


def test_too_many_devices_is_refused_before_anything_starts(devices):
    cfg = ppo(dict(actor_devices=2, learner_devices=len(devices)))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"PPOConfig.runner.learner_devices must leave"):
        jra.train(cfg, progress=False)
    assert time.perf_counter() - start < 1.0 and runner_threads() == []


def test_device_split(devices):
    cfg = ppo(dict(actor_devices=1, learner_devices=2))
    assert placement.split_devices(cfg, devices) == ([devices[0]], devices[1:3])
    assert placement.split_devices(ppo({}), devices[:1]) == ([devices[0]], [devices[0]])


def test_cli_builds_an_async_config():
    args = train_parser("impala").parse_args(
        ["--algo", "impala", "--runner", "async", "--learner-devices", "2", "--no-deterministic",
         "--max-staleness", "3", "--num-envs", "16"])
    cfg = config_from_args(args)
    assert cfg == jra.ImpalaConfig(num_envs=16, runner=jra.AsyncConfig(
        learner_devices=2, deterministic=False, max_staleness=3))


def test_packing_is_exact():
    tree = {"f": np.array([1.5, -np.inf, np.nan], np.float32),
            "i": np.array([-3, 2**31 - 1], np.int32),
            "b": np.array([True, False]), "u8": np.arange(3, dtype=np.uint8),
            "h": np.array([0.1], np.float16),
            "frames": np.random.default_rng(0).integers(0, 256, (2, 5, 7), np.uint8),
            "i8": np.array([-128, 127, 5, -1, 0], np.int8)}
    packing = placement.Packing.of(tree)
    # bytes travel four to a word (70 frame bytes: 18 words); other narrow leaves one a word
    assert packing.size == 3 + 2 + 2 + 1 + 1 + 18 + 2
    back = jax.jit(lambda t: packing.unpack(packing.pack(t)))(tree)
    for name in tree:
        assert back[name].dtype == tree[name].dtype
        np.testing.assert_array_equal(back[name], tree[name])
    from jaxrl_async.runners import host_trajectory  # the host's numpy packing, bit for bit

    host = host_trajectory.pack_numpy(packing, tree)
    np.testing.assert_array_equal(host, jax.jit(packing.pack)(tree))
    for name, leaf in host_trajectory.unpack_numpy(packing, host).items():
        assert leaf.dtype == tree[name].dtype
        np.testing.assert_array_equal(leaf, tree[name])


def test_a_packed_rollout_reaches_a_cpu_learner_without_a_copy(devices):
    # A host rollout of Atari frames is tens of MB: copying it to the learner device held the
    # actor (and its envs) for as long as the pack itself (docs/results.md).
    from jaxrl_async.runners import host_trajectory

    tree = {"frames": np.ones((3, 5, 7), np.uint8), "x": np.arange(6, dtype=np.float32)}
    packing = placement.Packing.of(tree)
    where = placement.layout(ppo(dict(actor_devices=1, learner_devices=1)), devices[:2])
    for _ in range(8):  # whatever the allocator hands out
        host = host_trajectory.pack_numpy(packing, tree)
        batch = placement.to_learner([host], where)
        assert batch.devices() == {devices[1]}
        assert batch.addressable_data(0).unsafe_buffer_pointer() == host.ctypes.data
        np.testing.assert_array_equal(batch, jax.jit(packing.pack)(tree))


# --------------------------------------------------------------------------- learning
@pytest.mark.timeout(600)
@pytest.mark.parametrize("algo", ["ppo", "impala"])
def test_async_learns_cartpole(algo):
    # Budget: 5e5 env steps, lag 1 on one actor and one learner device. PPO: PureJaxRL's
    # settings; IMPALA: ImpalaConfig's defaults. The median of 5 seeds: one seed's final return
    # moves by 100+ with float rounding alone (PPO seed 0: 500, then 342 once the learner's
    # matmuls ran on rows; seed 2 was 434 before that change; docs/results.md).
    config = jra.PPOConfig if algo == "ppo" else jra.ImpalaConfig
    cfg = config(env="CartPole-v1", total_timesteps=500_000, runner=jra.AsyncConfig(lag=1))
    finals = []
    for seed in range(5):
        out = jra.train(cfg, seed=seed, progress=False)
        assert np.nanmean(out.metrics["episode_return"][:3]) < 100
        assert np.all(out.metrics["staleness"][1:] == 1)
        if algo == "impala":  # the data is an update old: V-trace's importance weights work
            assert np.abs(out.metrics["rho_mean"][1:] - 1.0).max() > 1e-3
        finals.append(final_return(out.metrics))
    assert np.median(finals) >= 450, finals


@pytest.mark.timeout(600)
def test_impala_learns_minatar_breakout():
    # A random policy scores about 0.25 per episode; budget 3e5 env steps (about 10 s here).
    cfg = jra.ImpalaConfig(env="Breakout-MinAtar", torso="mlp", total_timesteps=300_000,
                           runner=jra.AsyncConfig(lag=1))
    out = jra.train(cfg, seed=0, progress=False)
    returns = out.metrics["episode_return"]
    assert np.nanmean(returns[:5]) < 0.5
    assert final_return(out.metrics) >= 2.0, returns[-20:]


def test_every_rollout_counts_though_its_actor_is_slow_to_finish(monkeypatch):
    # An actor hands a rollout over before it waits for it and counts it; the learner can train
    # on the last one and the run end before the actor counts it (seen under load: 960 of
    # 1024 steps). Here every actor waits 1 s after handing over: none is left out.
    wait = jax.block_until_ready

    def slow_in_actors(x):
        if "-actor-" in threading.current_thread().name and isinstance(x, tuple):
            time.sleep(1.0)
        return wait(x)

    monkeypatch.setattr(actor_learner.jax, "block_until_ready", slow_in_actors)
    cfg = ppo(dict(actors_per_device=2, learner_devices=2, lag=1, sync_every=2, max_staleness=2))
    out = runners.run(cfg, jax.random.key(5), devices=jax.local_devices()[:3])
    assert out.timing["env_steps_collected"] == cfg.num_updates * cfg.steps_per_update

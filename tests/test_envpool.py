"""Atari through EnvPool (``envpool:Breakout-v5``, ``envpool:Pong-v5``) on the host actors with
the Nature-DQN torso: the trajectory contract (a lost life is no episode's end; truncation at
the time limit with the final observation), frames as bytes up to the learner, and IMPALA under
the async runner with 1 and 2 actor threads. Skipped only where envpool is not installed (the
``envpool`` extra)."""

import dataclasses
import json

import jax
import numpy as np
import pytest

envpool = pytest.importorskip("envpool")

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.algos import make_algorithm  # noqa: E402
from jaxrl_async.config.shared import to_dict  # noqa: E402
from jaxrl_async.envs import env_spec  # noqa: E402
from jaxrl_async.envs.host_envpool import EnvPoolVecEnv  # noqa: E402
from jaxrl_async.runners import host_actors, host_streams, placement  # noqa: E402
from tests.conftest import compile_once, runner_threads  # noqa: E402

FRAMES = (4, 84, 84)


def impala(env: str, threads: int, deterministic: bool = True) -> jra.ImpalaConfig:
    return jra.ImpalaConfig(env=env, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                            hidden_sizes=(64,), log_every=1, fast_compile=True,
                            runner=jra.AsyncConfig(actors_per_device=threads, lag=1,
                                                   deterministic=deterministic))


@pytest.fixture(scope="module", autouse=True)
def reuse_compiled():
    """One compile per stream count: Breakout and Pong share the spec up to the id."""

    def key(cfg, host, algo, where):
        spec = host.policy_spec
        fields = {k: v for k, v in to_dict(cfg).items() if k not in ("env", "runner")}
        return (json.dumps(fields, sort_keys=True), dataclasses.replace(spec, env_id=""),
                spec.num_actions, cfg.runner.num_streams,
                host_streams.stream_groups(cfg.runner, host, where), tuple(where.actor_devices),
                tuple(where.learner_devices))

    yield from compile_once(host_actors, "compile_host_programs", key)


def test_a_lost_life_is_not_the_end_of_a_breakout_episode():
    # Random actions until the first game is over: the lives fall 5 -> 0 inside one episode
    # (EnvPool's info), and only the game's end is `terminated`, where the env resets.
    spec = env_spec("envpool:Breakout-v5")
    assert spec.obs_shape == FRAMES and spec.obs_dtype == np.uint8 and spec.num_actions == 4
    env = EnvPoolVecEnv(spec, 1)
    reference = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, seed=3)
    try:
        obs = env.reset([3])
        np.testing.assert_array_equal(obs, reference.reset()[0])
        rng, lives, t = np.random.default_rng(0), [], 0
        while True:
            action = rng.integers(0, 4, 1)
            step = env.step(action)
            ref_obs, _, ref_term, _, info = reference.step(action)
            lives.append(int(info["lives"][0]))
            t += 1
            np.testing.assert_array_equal(step.final_obs, ref_obs)
            assert not step.truncated[0]
            if step.terminated[0]:
                break
            assert ref_term[0] == 0 and t < 20_000
            np.testing.assert_array_equal(step.obs, step.final_obs)
    finally:
        env.close()
        reference.close()
    assert lives[0] == 5 and lives[-1] == 0 and sorted(set(lives)) == [0, 1, 2, 3, 4, 5]
    assert not np.array_equal(step.obs, step.final_obs)  # the next game's first frames


@pytest.mark.timeout(120)
def test_pools_per_group_reset_in_the_step_an_episode_ends():
    # 4 envs in 2 groups (a pool of 2 each, 2 threads), episodes cut at 4 steps, step by step
    # against one single-env pool per env stepped with EnvPool's own next-step autoreset: the
    # same frames, rewards and ends; where an episode ended, final_obs is the pool's last frames
    # and obs the frames its next (reset) step returns. Env j of a group is seeded as EnvPool
    # seeds it: the group's seed + j.
    spec = env_spec("envpool:Pong-v5")
    env = EnvPoolVecEnv(spec, 4, groups=2, threads=2, max_episode_steps=4)
    refs = [envpool.make("Pong-v5", env_type="gymnasium", num_envs=1, seed=s,
                         max_episode_steps=4) for s in (20, 21, 40, 41)]
    try:
        obs = env.reset([20, 99, 40, 99])
        for i, ref in enumerate(refs):
            np.testing.assert_array_equal(obs[i], ref.reset()[0][0])
        rng, ends = np.random.default_rng(0), 0
        for t in range(10):
            action = rng.integers(0, spec.num_actions, 4)
            step = env.step(action)
            for i, ref in enumerate(refs):
                o, r, term, trunc, _ = ref.step(action[i:i + 1])
                np.testing.assert_array_equal(step.final_obs[i], o[0])
                assert (step.reward[i], step.terminated[i], step.truncated[i]) == (
                    r[0], term[0], trunc[0])
                if term[0] or trunc[0]:
                    ends += 1
                    o, r, term, trunc, info = ref.step(np.zeros(1, np.int32))  # the reset step
                    assert info["elapsed_step"][0] == 0
                    assert not np.array_equal(step.obs[i], step.final_obs[i])
                np.testing.assert_array_equal(step.obs[i], o[0], err_msg=f"env {i} at t={t}")
        assert ends == 2 * 4  # truncated at t = 3 and 7
    finally:
        env.close()
        for ref in refs:
            ref.close()


@pytest.mark.timeout(600)
def test_pong_through_host_actors_truncates_with_the_final_frames(devices):
    # The host actor of the IMPALA run below (Nature CNN), on Pong cut at 3 steps: every env is
    # truncated at t = 2 and 5 (a point takes longer), next_obs there is the episode's last
    # frames, the next obs the first frames of a new game; frames stay uint8 into the packing.
    cfg = impala("envpool:Pong-v5", 1)
    assert cfg.resolved_torso == "nature"
    where = placement.layout(cfg, devices[:2])
    host = host_streams.host_plan(cfg)
    spec = host.spec
    programs = host_actors.compile_host_programs(cfg, host, make_algorithm(cfg, spec), where)
    obs_leaves = [x for x in programs.piece.leaves if x.shape[-3:] == FRAMES]
    assert obs_leaves and all(x.dtype == np.uint8 for x in obs_leaves)
    state = programs.learner.init(jax.random.key(0))
    params = jax.device_put(
        programs.learner.pack_params(jax.device_put(state._replace(env=()), where.replicated)),
        where.actor_devices[0])
    env = EnvPoolVecEnv(spec, 4, groups=2, max_episode_steps=3)
    try:
        actor = host_actors.make_batcher(cfg, host, env, programs, where.streams[0],
                                         host.fresh_normalizer(env.num_envs))
        actor.reset([11, 12, 13, 14])
        traj, _ = actor.rollout(params, jax.device_put(state.key, where.actor_devices[0]), 0, 0)
    finally:
        env.close()
    assert traj.obs.dtype == np.uint8 and traj.obs.shape == (8, 4, *FRAMES)
    assert traj.next_obs.dtype == np.uint8
    np.testing.assert_array_equal(traj.truncated,
                                  np.broadcast_to(np.isin(np.arange(8), [2, 5])[:, None], (8, 4)))
    assert not np.asarray(traj.terminated).any()
    # env 0 against EnvPool itself, same seed and actions: obs, next_obs and the reset
    reference = envpool.make("Pong-v5", env_type="gymnasium", num_envs=1, seed=11,
                             max_episode_steps=3)
    try:
        np.testing.assert_array_equal(traj.obs[0, 0], reference.reset()[0][0])
        for t in range(8):
            ref_obs, _, _, ref_trunc, _ = reference.step(np.asarray(traj.action[t, :1]))
            assert bool(ref_trunc[0]) == (t in (2, 5))
            np.testing.assert_array_equal(traj.next_obs[t, 0], ref_obs[0])  # the final frames
            if ref_trunc[0]:
                ref_obs = reference.reset()[0]
            if t < 7:
                np.testing.assert_array_equal(traj.obs[t + 1, 0], ref_obs[0])
    finally:
        reference.close()
    np.testing.assert_array_equal(traj.next_obs[:2], traj.obs[1:3])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("threads, deterministic", [(1, True), (2, True), (1, False)],
                         ids=["1-stream", "2-streams", "free-running"])
def test_impala_trains_on_pong_with_actor_threads(threads, deterministic):
    # The batched path (a pool per group, one policy call per group) under both schedules.
    cfg = impala("envpool:Pong-v5", threads, deterministic)
    out = jra.train(cfg, seed=0, progress=False)
    if deterministic:
        assert out.timing["env_steps_collected"] == cfg.num_updates * cfg.steps_per_update
        assert np.all(out.metrics["staleness"][1:] == 1)
    else:
        assert out.timing["env_steps_trained"] == cfg.num_updates * cfg.steps_per_update
    for name in ("loss", "entropy"):
        values = [v for k, v in out.metrics.items() if k.endswith(name)]
        assert values and all(np.isfinite(v).all() for v in values), name
    for leaf in jax.tree.leaves(out.params):
        assert np.isfinite(np.asarray(leaf)).all()
    assert runner_threads() == []

"""Frozen, validated configs that are also pytrees.

Every config field is one of two kinds:

- ``hyper(...)``: a number that does not change any array shape (learning rate, gamma, clip ...).
  It is a pytree *leaf*, so ``jax.vmap`` can sweep it inside one compiled program.
- ``static(...)``: anything that changes shapes or program structure (``num_envs``, network
  sizes, the env id, the runner). It is pytree *aux data*: part of the compiled program.

Each field may carry a ``check`` returning an error text or ``None``. Checks run on construction
for concrete values, then the class's ``validate()`` (cross-field rules), so a bad value raises
``ValueError`` naming the field and what is allowed before anything compiles. Unflattening a
pytree (inside ``jit``/``vmap``) skips the checks: traced leaves cannot be checked, and they were
checked when the config was built.
"""

from __future__ import annotations

from typing import Any

from jaxrl_async.config.fields import (  # noqa: F401 - the field machinery, importable from here
    INT32_MAX,
    Check,
    FieldTypeError,
    boolean,
    config,
    fail,
    field_docs,
    finite,
    hyper,
    hyper_fields,
    in_range,
    kind_error,
    non_negative,
    non_negative_int,
    one_of,
    positive,
    positive_count,
    positive_int,
    positive_int_tuple,
    redefault,
    static,
    static_fields,
    to_dict,
)
from jaxrl_async.envs.host_plan import HOST_VECTORIZATIONS  # how host envs step: the env layer's

# --------------------------------------------------------------------------- shared configs


def host_vectorization(x: object) -> str | None:
    if x in HOST_VECTORIZATIONS:
        return None
    retired = (" ('sync' and 'async', the gymnasium vector envs of one thread or one process "
               "per env, were retired: 'inline' steps envs in the thread, 'workers' in worker "
               "processes)") if x in ("sync", "async") else ""
    return f"must be one of {list(HOST_VECTORIZATIONS)}{retired}"


@config
class SyncConfig:
    """The fused on-device runner: rollout and update in one ``lax.scan``."""

    num_devices: int = static(1, positive_int)
    """Devices to run data-parallel over, num_envs split across them (in a distributed run,
    the devices of all processes)."""

    name = "sync"


@config
class AsyncConfig:
    """The actor/learner runner: rollouts on actor devices, updates on learner devices, a
    host pipeline between them (see ``runners/actor_learner.py``)."""

    actor_devices: int = static(1, positive_int)
    """Local devices that run rollouts (the first ones)."""
    learner_devices: int = static(1, positive_int)
    """Local devices, after the actor devices, that run the update data-parallel (pmean)."""
    actors_per_device: int = static(1, positive_int)
    """Actor streams per actor device, each with its own slice of the envs and its own thread."""
    deterministic: bool = static(True, boolean)
    """Lock-step schedule with a fixed lag: a seed reproduces a run exactly, whatever the thread
    timing. False: actors run ahead through a bounded queue (free-running)."""
    lag: int = static(1, one_of(0, 1))
    """Deterministic mode: rollout k acts with the params of update k - lag. 0 reproduces the
    sync runner; 1 collects rollout k+1 while the learner updates on rollout k."""
    sync_every: int = static(1, positive_int)
    """Updates between param pushes to the actor devices."""
    max_staleness: int = static(1, non_negative_int)
    """Never train on a batch whose params are more than this many updates old."""
    stale_policy: str = static("drop", one_of("drop", "correct"))
    """Free-running mode, a batch that would exceed max_staleness: 'drop' discards it (actors
    never wait); 'correct' keeps every batch (actors wait for fresh enough params) and relies on
    the loss's off-policy correction (PPO's ratio, V-trace) for the lag within the bound."""
    queue_size: int = static(4, positive_int)
    """Free-running mode: most trajectories collected or being collected and not yet taken by
    the learner (bounds memory and staleness), split evenly over the streams (at least one
    each: every stream is its own queue, so each env's data stays in time order)."""
    host_vectorization: str = static("workers", host_vectorization)
    """Host gymnasium envs (env='gymnasium:...'): 'workers' steps each actor stream's envs in
    worker processes writing into shared memory (host_workers of them), 'inline' one after
    another in the stream's thread (tests, envs faster than a process round trip). EnvPool
    envs always step in EnvPool's own threads."""
    host_workers: int = static(0, non_negative_int)
    """host_vectorization='workers': worker processes per actor stream (0: the cores divided
    by the streams, at least 1, and with host_threads=0 at least one per 16 envs); each steps an
    equal share of every group."""
    host_threads: int = static(0, non_negative_int)
    """Threads (lanes) per host worker process (0: one per env, so envs that wait overlap their
    waits; 1: a worker steps its envs one after another, for CPU-bound envs); for EnvPool envs,
    its num_threads per pool (0: EnvPool's default, one per core)."""
    host_groups: int = static(0, non_negative_int)
    """Groups each actor stream splits its host envs into, so the policy acts on one group
    while the others step (double buffering with 2); must divide the stream's envs, at most
    256. 0: 4 where the envs step in worker processes and each group then still holds 16 or
    more envs, else 2 where the stream's envs are even, else 1 (runners/host_batcher.groups)."""
    host_step_timeout: float = static(60.0, non_negative)
    """Seconds a step (or reset) of a group of host envs in worker processes may take; a slower
    one stops the run with an error naming the env id and the envs that did not answer, and the
    worker processes are terminated. 0: wait forever."""

    name = "async"

    @property
    def num_streams(self) -> int:
        return self.actor_devices * self.actors_per_device

    def validate(self) -> None:
        least = self.lag + self.sync_every - 1
        if self.max_staleness < least:
            fail(self, "max_staleness", f"must be >= lag + sync_every - 1 = {least} (the "
                 "staleness of the lock-step schedule, and what a free-running actor may need "
                 "to wait for)")


@config
class TrainConfig:
    """Fields every algorithm shares: the env, the batch shape, the budget, the runner."""

    env: str = static("CartPole-v1")
    """Environment id: any gymnax id (e.g. CartPole-v1, Pendulum-v1, Breakout-MinAtar), a suite
    id (brax/<name>, craftax/<id>, xminigrid/<id>, navix/<id>, jumanji/<id>, with its extra) or
    a name given to jaxrl_async.register_env or an entry point of the group jaxrl_async.envs,
    run on the device; or a host env stepped by CPU threads, with the async runner only:
    'gymnasium:<id>' (any registered gymnasium id, e.g. gymnasium:CartPole-v1) or
    'envpool:<id>' (needs the package envpool), which gets AsyncConfig() when no runner is
    named. Each actor stream (runner.actors_per_device per actor device) is one thread owning
    num_envs / streams host envs, seeded per env from the run seed; a run resumed from a
    checkpoint resets them afresh."""
    total_timesteps: int = static(499_712, positive_count)  # PureJaxRL's 5e5 in whole updates
    """Environment steps to train for (summed over all envs), in whole updates of num_envs *
    num_steps: a remainder is not trained (a warning names the steps trained)."""
    num_envs: int = static(4, positive_int)
    """Parallel environments (summed over all devices)."""
    num_steps: int = static(128, positive_int)
    """Steps per env per rollout (the trajectory length T)."""
    gamma: float = hyper(0.99, in_range(0.0, 1.0))
    """Discount factor."""
    normalize_obs: bool = static(False, boolean)
    """Standardise observations with running statistics, then clip them to +-obs_clip. Device
    envs: statistics of all envs, frozen within a rollout and merged once per rollout; host
    envs: per env, updated every step, the numbers of gymnasium's NormalizeObservation around
    each env (docs/envs.md)."""
    normalize_reward: bool = static(False, boolean)
    """Scale rewards by the running standard deviation of each env's discounted return (gamma),
    then clip them to +-reward_clip: gymnasium's NormalizeReward (docs/envs.md). Episode
    returns in the metrics stay raw."""
    obs_clip: float = hyper(10.0, positive)
    """normalize_obs: the bound normalised observations are clipped to (CleanRL's 10)."""
    reward_clip: float = hyper(10.0, positive)
    """normalize_reward: the bound normalised rewards are clipped to (CleanRL's 10)."""
    torso: str = static("auto", one_of("auto", "mlp", "cnn", "nature"))
    """Network torso: mlp, cnn (MinAtar-style), nature (the Nature-DQN CNN on stacked frames
    [F, H, W], e.g. Atari's [4, 84, 84]; uint8 frames are scaled inside the network), or auto
    (nature for [F, 84, 84] frames, cnn for other image observations, else mlp)."""
    hidden_sizes: tuple[int, ...] = static((64, 64), positive_int_tuple)
    """Hidden layer sizes of the MLP (or the dense layers after the CNN)."""
    activation: str = static("tanh", one_of("tanh", "relu", "gelu", "silu"))
    """Hidden activation."""
    runner: Any = static(None)
    """Runner: SyncConfig(...) or AsyncConfig(...); None (the default): AsyncConfig() for a
    host env (gymnasium:<id>, envpool:<id>), else SyncConfig()."""
    log_every: int = static(10, positive_int)
    """Updates between metric fetches to the host (progress bar, sinks)."""
    grad_accum_steps: int = static(1, positive_int)
    """Split each learner batch into this many micro-batches and accumulate their gradients
    (same result, less activation memory)."""
    fast_compile: bool = static(False, boolean)
    """Compile with XLA:CPU's legacy emitters: ~40% less compile time, ~15% slower steps (for
    short runs and sweeps on a CPU; ignored on other platforms)."""
    checkpoint_every: int = static(0, non_negative_int)
    """Updates between checkpoints of the full training state in the run directory (written at
    the end of the first log_every chunk past each multiple; 0: only at the end)."""
    keep_checkpoints: int = static(2, positive_int)
    """Checkpoints kept in the run directory (the newest ones)."""
    tensorboard: bool = static(False, boolean)
    """Also write TensorBoard event files to <run dir>/tensorboard (JSONL and CSV always)."""
    eval_every: int = static(0, non_negative_int)
    """Updates between evaluations on fresh envs inside the compiled program (and after the
    last update), reported as eval_return and eval_length (NaN between evaluations); 0: none.
    Device envs only (host envs are evaluated after training, or from a checkpoint)."""
    eval_episodes: int = static(10, positive_int)
    """Episodes per evaluation (fresh envs run in parallel; split over the devices when they
    divide it)."""
    eval_greedy: bool = static(True, boolean)
    """Evaluate with the policy's mode (argmax, Gaussian mean); False: sample actions."""

    name = "base"
    accumulates_gradients = False  # whether the learner honours grad_accum_steps
    masks_actions = False  # whether its policy reads an env's action mask (EnvSpec.action_mask)

    # Fields that only say where and how often to write things: they may differ between a run
    # and its resumption (everything else must match).
    # Evaluation never changes training (its keys are its own), so it may change on resume too.
    io_fields = ("checkpoint_every", "keep_checkpoints", "tensorboard", "eval_every",
                 "eval_episodes", "eval_greedy")

    # ----------------------------------------------------------------- derived
    @property
    def title(self) -> str:
        """The algorithm's name as text writes it (``PPO``; ``Recurrent PPO`` sets its own)."""
        return self.name.upper()

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.steps_per_update

    def budget_schedules(self) -> list[str]:
        """What this config plans over ``total_timesteps`` (a learning rate annealed to 0 at
        the end, an exploration decay): why a run may not simply train for longer. Mixins
        that plan a schedule add theirs (``super().budget_schedules()``)."""
        return []

    @property
    def resolved_torso(self) -> str:
        if self.torso != "auto":
            return self.torso
        from jaxrl_async.envs import env_spec
        from jaxrl_async.networks.torsos import resolve_torso

        return resolve_torso(self.torso, env_spec(self.env).obs_shape)

    @property
    def flatten_obs(self) -> bool:
        return self.resolved_torso == "mlp"

    # ----------------------------------------------------------------- checks
    def validate(self) -> None:
        from jaxrl_async.envs import check_env_id, env_spec, is_host_env

        if self.runner is None:  # the runner that can run the env (frozen: set once, here)
            object.__setattr__(self, "runner",
                               AsyncConfig() if is_host_env(self.env) else SyncConfig())
        try:
            check_env_id(self.env)
        except ValueError as e:
            raise ValueError(f"{type(self).__name__}.env: {e}") from None
        if self.num_updates * self.num_steps > INT32_MAX:
            fail(self, "total_timesteps", f"must be < num_envs * {INT32_MAX + 1} = "
                 f"{self.num_envs * (INT32_MAX + 1)} (each env's steps are counted in int32)")
        if self.total_timesteps < self.steps_per_update:
            fail(self, "total_timesteps",
                 f"must be >= num_envs * num_steps = {self.steps_per_update}")
        spec = env_spec(self.env)
        obs_shape = spec.obs_shape
        if spec.action_mask:
            if not self.masks_actions:
                fail(self, "env", f"must have no action mask for {type(self).__name__} (it "
                     "does not read one; algorithms that do: ppo, impala)")
            if self.normalize_obs:
                fail(self, "normalize_obs", f"must be False for {self.env} (the observation "
                     "carries its action mask)")
        if self.torso == "cnn" and len(obs_shape) != 3:
            fail(self, "torso", f"'cnn' needs image observations [H, W, C]; {self.env} has "
                 f"shape {obs_shape}; allowed here: 'mlp' or 'auto'")
        if self.torso == "nature" and (len(obs_shape) != 3 or min(obs_shape[1:]) < 36):
            fail(self, "torso", f"'nature' needs stacked frames [F, H, W] with H, W >= 36; "
                 f"{self.env} has shape {obs_shape}; allowed here: 'mlp', 'auto'"
                 + (" or 'cnn'" if len(obs_shape) == 3 else ""))
        if not hasattr(self.runner, "name") or self.runner.name not in ("sync", "async"):
            fail(self, "runner", "must be SyncConfig(...) or AsyncConfig(...)")
        if self.runner.name == "sync" and self.num_envs % self.runner.num_devices:
            fail(self, "num_envs",
                 f"must be divisible by runner.num_devices = {self.runner.num_devices}")
        if is_host_env(self.env):
            if self.runner.name != "async":
                fail(self, "runner", f"must be AsyncConfig(...) for the host env {self.env!r}, "
                     "or left out, which picks it (jaxrl-async: --runner async or no "
                     "--runner): host envs step in worker processes or EnvPool's threads and "
                     "the async runner's host actors act on them; the sync runner steps its "
                     "envs inside one JAX program")
            per_stream = self.num_envs // self.runner.num_streams
            if self.runner.host_groups > 256:
                fail(self, "runner", f"host_groups={self.runner.host_groups} must be at most 256 "
                     "(a group's number crosses to its worker processes as one byte)")
            if self.runner.host_groups and per_stream % self.runner.host_groups:
                fail(self, "runner", f"host_groups={self.runner.host_groups} must divide each "
                     f"actor stream's {per_stream} host envs (num_envs / streams)")
        if self.eval_every and is_host_env(self.env):
            fail(self, "eval_every", f"must be 0 for the host env {self.env!r}: evaluation "
                 "during training runs inside the compiled program, on device envs; a host-env "
                 "run is evaluated after training (jaxrl-async train prints a final "
                 "evaluation; jra.evaluate(result, cfg); jaxrl-async eval RUN_DIR for any "
                 "checkpoint, e.g. every checkpoint_every updates)")
        if self.runner.name == "async":
            self.check_async_env_split()
        if not self.accumulates_gradients and self.grad_accum_steps != 1:
            fail(self, "grad_accum_steps", f"must be 1 for {type(self).__name__} (gradients are "
                 "accumulated by the minibatch learners: ppo, recurrent_ppo, pqn)")

    def check_async_env_split(self, processes: int = 1) -> None:
        """``ValueError`` naming ``num_envs`` unless the async runner can split the envs: each
        actor stream (of every process) steps num_envs / streams envs, and the learner splits
        every stream's trajectory over its devices along the env axis."""
        split = processes * self.runner.num_streams * self.runner.learner_devices
        if self.num_envs % split:
            by = "processes * " if processes > 1 else ""
            fail(self, "num_envs", f"must be divisible by {by}runner.actor_devices * "
                 f"actors_per_device * learner_devices = {split}")

    def require_micro_batches(self, rows: int, what: str) -> None:
        """``ValueError`` naming ``grad_accum_steps`` unless it divides the ``rows`` of a
        minibatch's leading axis (``what`` they are), which micro-batches split."""
        if rows % self.grad_accum_steps:
            fail(self, "grad_accum_steps", f"must divide the {what} per minibatch = {rows}")

    @property
    def is_discrete(self) -> bool:
        from jaxrl_async.envs import env_spec

        return env_spec(self.env).discrete

    def require_discrete(self, discrete: bool) -> None:
        """``ValueError`` naming ``env`` when its action space is not the kind the algorithm
        handles (call from ``validate``)."""
        if self.is_discrete != discrete:
            kind = "discrete" if discrete else "continuous"
            fail(self, "env", f"must have {kind} actions for {type(self).__name__}")


# --------------------------------------------------------------------------- field mixins
# Fields several algorithms declare: a config lists the mixin before its base class
# (``class PPOConfig(OptimizerFields, TrainConfig)``), so the mixin's fields follow the base's,
# and changes a default with ``redefault(OptimizerFields, "lr", 3e-3)``.
@config
class OptimizerFields:
    """The learning rate and gradient clipping of a gradient-trained learner."""

    lr: float = hyper(2.5e-4, positive)
    """Adam learning rate."""
    anneal_lr: bool = static(True, boolean)
    """Anneal the learning rate linearly to 0 over training."""
    max_grad_norm: float = hyper(0.5, positive)
    """Global-norm gradient clipping (optax.clip_by_global_norm)."""

    def budget_schedules(self) -> list[str]:
        planned = ["anneal_lr=True: the learning rate falls linearly to 0 at total_timesteps"]
        return [*super().budget_schedules(), *(planned if self.anneal_lr else [])]


@config
class EpsilonGreedyFields:
    """The linear exploration schedule of an epsilon-greedy policy."""

    eps_start: float = hyper(1.0, in_range(0.0, 1.0))
    """Exploration epsilon at the start."""
    eps_end: float = hyper(0.05, in_range(0.0, 1.0))
    """Exploration epsilon after the decay."""
    eps_decay_fraction: float = static(0.3, in_range(0.0, 1.0, lo_open=True))
    """Fraction of total_timesteps over which epsilon falls linearly to eps_end."""

    def budget_schedules(self) -> list[str]:
        return [*super().budget_schedules(), "epsilon falls to eps_end over "
                f"eps_decay_fraction={self.eps_decay_fraction} of total_timesteps"]

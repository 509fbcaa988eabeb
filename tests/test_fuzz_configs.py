"""Config fuzzing (hypothesis): random field values for every algorithm config and both runner
configs. A rejected config raises ``ValueError``/``TypeError`` naming a field, before anything
compiles; an accepted one builds: ``jax.eval_shape`` of ``make_train`` (sync), or the async
runner's program construction (device layout, tracing and lowering of every program) up to,
not including, the first compile.

``make test`` runs the ``ci`` profile (few examples, derandomized); ``make fuzz`` the ``fuzz``
profile (many, random) and prints the counts (docs/reliability.md)."""

import collections
import dataclasses
import json
import math
import os
import re

import jax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxrl_async.algos import REGISTRY
from jaxrl_async.config.shared import AsyncConfig, SyncConfig
from jaxrl_async.run.train import make_train
from jaxrl_async.runners import actor_learner

settings.register_profile("ci", max_examples=3, derandomize=True, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("fuzz", max_examples=150, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck))
if os.environ.get("JRA_FUZZ"):  # JRA_FUZZ=N: N build examples (1: the profile's 150)
    if int(os.environ["JRA_FUZZ"]) > 1:
        settings.register_profile("fuzz", settings.get_profile("fuzz"),
                                  max_examples=int(os.environ["JRA_FUZZ"]))
    settings.load_profile("fuzz")
elif settings._current_profile == "default":  # noqa: SLF001 - unless --hypothesis-profile
    settings.load_profile("ci")
EXAMPLES = settings().max_examples
CONSTRUCT = settings(max_examples=EXAMPLES * 5)  # construction alone takes milliseconds

ALGOS = {name: entry[0] for name, entry in REGISTRY.items()}
RUNNERS = {"SyncConfig": SyncConfig, "AsyncConfig": AsyncConfig}
CLASSES = {cls.__name__: cls for cls in [*ALGOS.values(), *RUNNERS.values()]}
# A small valid config of each algorithm, the fuzzer changes some of its fields.
BASE = dict(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 4, hidden_sizes=(8,))
ODD = [None, "x", "", [4], (), -1, 0, -0.5, 0.0, math.nan, math.inf, -math.inf, 2**31, 10**12,
       1e30, 10**400, True, False]
STRINGS = ["tanh", "relu", "gelu", "silu", "auto", "mlp", "cnn", "drop", "correct", "sync",
           "async", "adam", "rmsprop", "TANH", "nope"]
ENVS = ["CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0",
        "Breakout-MinAtar", "CartPol-v1", "cartpole", "gymnasium:NoSuch-v0"]
FIELD = re.compile(r"\b(\w+Config)\.(\w+)")
COUNTS: collections.Counter = collections.Counter()


def values(default):
    """A field's value: mostly of the field's kind (some out of range), else anything odd."""
    if isinstance(default, bool):
        good = st.booleans()
    elif isinstance(default, int):
        good = st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128, 1024])
    elif isinstance(default, float):
        good = st.floats(0.0, 1.0) | st.sampled_from([default, 1e-4, 2.0, 64.0])
    elif isinstance(default, tuple):
        good = st.lists(st.sampled_from([1, 8, 16, 0, -2]), max_size=3).map(tuple)
    elif isinstance(default, str):
        good = st.sampled_from(STRINGS)
    else:
        good = st.nothing()
    return st.one_of(good, good, st.sampled_from(ODD))


def changes(draw, cls, most: int = 3) -> dict:
    """Up to ``most`` fields of ``cls`` with fuzzed values (the runner a lazily built config)."""
    names = draw(st.lists(st.sampled_from([f.name for f in dataclasses.fields(cls)]),
                          max_size=most, unique=True))
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in names:
            continue
        if f.name == "env":
            out[f.name] = draw(st.sampled_from(ENVS) | st.sampled_from(ODD))
        elif f.name == "runner":
            runner = draw(st.sampled_from([SyncConfig, AsyncConfig, None, "async"]))
            out[f.name] = (runner, changes(draw, runner) if isinstance(runner, type) else {})
        else:
            out[f.name] = draw(values(f.default))
    return out


def construct(cls, kwargs: dict):
    kwargs = dict(kwargs)
    if "runner" in kwargs:
        runner, runner_kwargs = kwargs["runner"]
        kwargs["runner"] = runner(**runner_kwargs) if isinstance(runner, type) else runner
    return cls(**kwargs)


def names_a_field(error: Exception) -> None:
    found = FIELD.search(str(error))
    assert found, f"{type(error).__name__} names no field: {error}"
    cls = CLASSES.get(found.group(1))
    assert cls is not None and found.group(2) in {f.name for f in dataclasses.fields(cls)}, (
        f"{error} names no field of a config")


class Compiling(Exception):
    """Raised instead of the first compile: construction ran up to it."""


@pytest.fixture
def no_compile(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise Compiling

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)


def build(cfg) -> None:
    """Build ``cfg``'s program without compiling it."""
    if cfg.runner.name == "sync":
        jax.eval_shape(make_train(cfg), jax.random.key(0))
        return
    try:
        actor_learner.prepare(cfg, jax.random.key(0))
    except Compiling:
        return
    raise AssertionError("the async runner's preparation did not reach a compile")


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    record = {"profile": settings._current_profile, **{  # noqa: SLF001
        f"{cls}/{outcome}": n for (cls, outcome), n in sorted(COUNTS.items())}}
    if os.environ.get("JRA_FUZZ_REPORT"):
        with open(os.environ["JRA_FUZZ_REPORT"], "a") as out:
            out.write(json.dumps(record) + "\n")
    print(json.dumps(record))


OWN_BASE = {"sac": dict(env="Pendulum-v1", buffer_size=1024, learning_starts=128),
            "recurrent_ppo": dict(bptt_length=8), "dqn": dict(buffer_size=1024)}


def base(cls: type) -> dict:
    if cls in RUNNERS.values():
        return {}
    return {**BASE, **OWN_BASE.get(cls.name, {})}


@pytest.mark.parametrize("name", list(CLASSES))
@CONSTRUCT
@given(data=st.data())
def test_a_config_is_valid_or_rejected_naming_a_field(name, data):
    """Construction alone, every config class: many examples, milliseconds each."""
    cls = CLASSES[name]
    kwargs = {**base(cls), **data.draw(st.composite(lambda draw: changes(draw, cls))())}
    try:
        construct(cls, kwargs)
    except (ValueError, TypeError) as error:
        names_a_field(error)
        COUNTS[name, "rejected"] += 1
    else:
        COUNTS[name, "accepted"] += 1


@given(data=st.data())
def test_an_accepted_config_builds_without_compiling(data, no_compile):
    """Accepted configs build their program (sync: eval_shape of make_train; async: layout,
    tracing and lowering up to the first compile); a layout that does not fit the 4 devices
    is rejected naming the field, before any compile."""
    name = data.draw(st.sampled_from(list(ALGOS)))
    cls = ALGOS[name]
    kwargs = {**base(cls), **data.draw(st.composite(lambda draw: changes(draw, cls, 2))())}
    if "runner" not in kwargs and data.draw(st.booleans()):  # layouts, async programs
        runner = data.draw(st.sampled_from([SyncConfig, AsyncConfig]))
        kwargs["runner"] = (runner, data.draw(st.composite(lambda d: changes(d, runner, 2))()))
    try:
        cfg = construct(cls, kwargs)
    except (ValueError, TypeError) as error:
        names_a_field(error)
        COUNTS[name, "rejected"] += 1
        return
    try:
        build(cfg)
    except (ValueError, TypeError) as error:
        names_a_field(error)
        COUNTS[name, "rejected_at_build"] += 1
        return
    COUNTS[name, "built"] += 1

"""Speed of the CNN torso on a CPU: PPO on Breakout-MinAtar (sync runner) with the MinAtar CNN
written with ``jaxrl_async.networks.conv.Conv`` (ours), the same network written with flax
``nn.Conv`` (the way PureJaxRL and purejaxql write it), and the MLP torso, in one run.

    python experiments/bench/bench_conv.py [--num-envs 64 --num-steps 64 --updates 2 --repeats 3]

Each network's training program is compiled once and run ``--repeats`` times; SPS counts env
steps trained on per second after compilation (median over repeats; the three networks take
turns, so the machine's load falls on each alike). The flax-conv network has the same
parameters and init as ours (``nn.Conv`` with the same names), so only the convolution's code
differs. Prints one JSON line: the SPS of each, ``speedup_vs_flax_conv = ours / flax`` and
``mlp_over_ours = mlp / ours``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence

import flax.linen as nn
import jax
import numpy as np

import jaxrl_async as jra
from jaxrl_async import networks
from jaxrl_async.runners.common import compiler_options


class FlaxConvMinAtarCNN(nn.Module):
    """``networks.MinAtarCNN`` with flax's ``nn.Conv`` (PureJaxRL's MinAtar torso)."""

    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = networks.ACTIVATIONS[self.activation]
        x = act(nn.Conv(16, (3, 3), padding="VALID", kernel_init=networks.orthogonal())(x))
        x = x.reshape(*x.shape[:-3], -1)
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=networks.orthogonal())(x))
        return x


networks.TORSOS["flax-conv"] = FlaxConvMinAtarCNN  # a torso name only this script uses


def program(cfg: jra.PPOConfig, torso: str):
    """The compiled training program of ``cfg`` with ``torso`` and its compile time."""
    if torso == "flax-conv":  # the config accepts only its own torsos: swap the class instead
        saved, networks.TORSOS["cnn"] = networks.TORSOS["cnn"], FlaxConvMinAtarCNN
    start = time.perf_counter()
    try:
        train = jra.make_train(cfg)
        compiled = jax.jit(train).lower(jax.random.key(0)).compile(compiler_options(cfg))
    finally:
        if torso == "flax-conv":
            networks.TORSOS["cnn"] = saved
    return compiled, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    steps = args.num_envs * args.num_steps * args.updates
    base = dict(env="Breakout-MinAtar", num_envs=args.num_envs, num_steps=args.num_steps,
                total_timesteps=steps, activation="relu", update_epochs=4, num_minibatches=4)
    configs = {"ours": jra.PPOConfig(torso="cnn", hidden_sizes=(128,), **base),
               "flax-conv": jra.PPOConfig(torso="cnn", hidden_sizes=(128,), **base),
               "mlp": jra.PPOConfig(torso="mlp", hidden_sizes=(64, 64), **base)}
    programs, compile_s = {}, {}
    for name, cfg in configs.items():
        programs[name], compile_s[name] = program(cfg, name)
    times: dict[str, list[float]] = {name: [] for name in configs}
    for seed in range(args.repeats):
        for name, compiled in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(jax.random.key(seed)))
            times[name].append(time.perf_counter() - start)
    sps = {name: steps / float(np.median(t)) for name, t in times.items()}
    print(json.dumps({
        "sps": sps, "compile_s": compile_s,
        "speedup_vs_flax_conv": sps["ours"] / sps["flax-conv"],
        "mlp_over_ours": sps["mlp"] / sps["ours"],
        "config": {**base, "hidden_cnn": [128], "hidden_mlp": [64, 64]},
        "repeats": args.repeats, "load_avg": os.getloadavg()[0], "jax": jax.__version__,
    }))


if __name__ == "__main__":
    main()

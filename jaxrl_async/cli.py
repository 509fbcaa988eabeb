"""The command line, generated from the config dataclasses (their fields and docstrings are the
one source of truth for flags and help).

    jaxrl-async train --algo ppo --env CartPole-v1 --runner sync --total-timesteps 5e5 --lr 3e-4
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from jaxrl_async import config as C


def runner_configs() -> dict[str, type]:
    """``--runner`` choices."""
    runners: dict[str, type] = {"sync": C.SyncConfig}
    if hasattr(C, "AsyncConfig"):
        runners["async"] = C.AsyncConfig
    return runners


def algo_configs() -> dict[str, type]:
    """``--algo`` choices."""
    from jaxrl_async.algos import REGISTRY

    return {name: entry[0] for name, entry in REGISTRY.items()}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _number(kind: type):
    """Parse ints given as ``1e6`` as well as ``1000000``."""

    def parse(text: str):
        if kind is int:
            value = float(text)
            if not value.is_integer():
                raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
            return int(value)
        return kind(text)

    parse.__name__ = kind.__name__
    return parse


def add_fields(group: Any, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One flag per dataclass field of ``cls``, help from its docstring, default shown."""
    docs = C.field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or dataclasses.is_dataclass(f.default):
            continue
        default = f.default
        text = f"{docs.get(f.name, '')} (default: {default!r})".replace("%", "%%")
        kw: dict[str, Any] = {"help": text, "default": argparse.SUPPRESS, "dest": f.name}
        if isinstance(default, bool):
            group.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, **kw)
        elif isinstance(default, tuple):
            group.add_argument(_flag(f.name), nargs="+", type=_number(int), **kw)
        elif isinstance(default, (int, float)):
            group.add_argument(_flag(f.name), type=_number(type(default)), **kw)
        else:
            group.add_argument(_flag(f.name), type=str, **kw)


def train_parser(algo: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxrl-async train", description=f"Train {algo.upper()}.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--algo", choices=sorted(algo_configs()), default=algo)
    parser.add_argument("--runner", choices=sorted(runner_configs()), default="sync")
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed")
    parser.add_argument("--run-dir", default=None,
                        help="where to write config, metrics and plots (default: runs/<name>)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar")
    add_fields(parser.add_argument_group(f"{algo} options"), algo_configs()[algo], ("runner",))
    for name, cls in runner_configs().items():
        add_fields(parser.add_argument_group(f"--runner {name} options"), cls)
    return parser


def config_from_args(args: argparse.Namespace) -> Any:
    """Build (and so validate) the config the parsed flags describe."""
    values = vars(args)
    runner_cls = runner_configs()[args.runner]
    runner_fields = {f.name for f in dataclasses.fields(runner_cls)}
    other_runner_fields = {
        f.name for cls in runner_configs().values() if cls is not runner_cls
        for f in dataclasses.fields(cls)
    } - runner_fields
    given_elsewhere = sorted(other_runner_fields & values.keys())
    if given_elsewhere:
        raise ValueError(f"{', '.join(_flag(n) for n in given_elsewhere)} do not apply to "
                         f"--runner {args.runner}")
    runner = runner_cls(**{k: v for k, v in values.items() if k in runner_fields})
    cfg_cls = algo_configs()[args.algo]
    algo_fields = {f.name for f in dataclasses.fields(cfg_cls)}
    kwargs = {k: (tuple(v) if isinstance(v, list) else v)
              for k, v in values.items() if k in algo_fields - {"runner"}}
    return cfg_cls(runner=runner, **kwargs)


def cpu_devices_for_roles(args: argparse.Namespace) -> None:
    """``--runner async``: on a CPU, give each role its own (forced) CPU device, unless
    XLA_FLAGS already sets a count. Must run before JAX starts its backend; the flag only
    concerns the CPU platform, so it changes nothing where JAX runs on an accelerator."""
    if args.runner != "async":
        return
    defaults = C.AsyncConfig()
    roles = (getattr(args, "actor_devices", defaults.actor_devices)
             + getattr(args, "learner_devices", defaults.learner_devices))
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={roles}".strip()


def cmd_train(argv: list[str]) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--algo", default="ppo", choices=sorted(algo_configs()))
    known, _ = pre.parse_known_args(argv)
    args = train_parser(known.algo).parse_args(argv)
    cpu_devices_for_roles(args)
    try:
        cfg = config_from_args(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from jaxrl_async.train import default_run_dir, summary, train

    run_dir = args.run_dir or default_run_dir(cfg)
    result = train(cfg, seed=args.seed, run_dir=run_dir, progress=args.progress)
    s = summary(cfg, result)
    print(f"\n{s['algo'].upper()} on {s['env']} ({s['runner']} runner), "
          f"{s['total_timesteps']:,} steps")
    print(f"  final return (mean of last 10 updates): {s['final_return']:.1f}")
    print(f"  SPS: {s['sps']:,.0f}   compile: {s['compile_s']:.1f} s   "
          f"train: {s['train_s']:.1f} s")
    print(f"  run directory: {run_dir}")
    return 0


COMMANDS = {"train": cmd_train}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: jaxrl-async {" + ",".join(COMMANDS) + "} [--help] ...", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())

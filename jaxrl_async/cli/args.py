"""From the flags to a config: which runner they ask for, the config they build, the CPU
devices an async run needs, and the one-line errors the command prints."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from typing import Any

from jaxrl_async.cli import options
from jaxrl_async.cli.parsers import Parser, _flag, algo_configs, runner_configs
from jaxrl_async.config.shared import AsyncConfig, SyncConfig


def wants_distributed(args: argparse.Namespace) -> bool:
    given = (args.coordinator_address, args.num_processes, args.process_id)
    return args.distributed or any(v is not None for v in given)


def join_distributed(args: argparse.Namespace) -> None:
    """``jra.distributed.initialize`` with the command line's values (must run before JAX
    starts its backend)."""
    from jaxrl_async.run import distributed

    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)


def runner_of(args: argparse.Namespace, base: Any = None) -> str:
    """The runner the flags ask for: ``--runner``, else the base config's, else the one the env
    needs: async for a host env (``--env gymnasium:...``, also over a base config whose runner
    is the default ``SyncConfig()``), sync otherwise."""
    given = getattr(args, "runner", None)
    if given is not None:
        return given
    env = getattr(args, "env", None)
    if env is None:
        if base is not None:
            return base.runner.name
        cls = algo_configs()[args.algo]
        env = next(f.default for f in dataclasses.fields(cls) if f.name == "env")
    from jaxrl_async.envs.host import is_host_env

    if base is not None and base.runner != SyncConfig():
        return base.runner.name
    return "async" if is_host_env(env) else "sync"


def config_from_args(args: argparse.Namespace, base: Any = None) -> Any:
    """Build (and so validate) the config the parsed flags describe; with ``base``, the flags
    given change that config."""
    values = vars(args)
    runner_name = runner_of(args, base)
    runner_cls = runner_configs()[runner_name]
    runner_fields = {f.name for f in dataclasses.fields(runner_cls)}
    other_runner_fields = {
        f.name for cls in runner_configs().values() if cls is not runner_cls
        for f in dataclasses.fields(cls)
    } - runner_fields
    given_elsewhere = sorted(other_runner_fields & values.keys())
    if given_elsewhere:
        raise ValueError(f"{', '.join(_flag(n) for n in given_elsewhere)} do not apply to "
                         f"--runner {runner_name}")
    runner_kwargs = {k: v for k, v in values.items() if k in runner_fields}
    if base is not None and runner_name == base.runner.name:
        runner = dataclasses.replace(base.runner, **runner_kwargs)
    else:
        runner = runner_cls(**runner_kwargs)
    cfg_cls = type(base) if base is not None else algo_configs()[args.algo]
    algo_fields = {f.name for f in dataclasses.fields(cfg_cls)}
    kwargs = {k: (tuple(v) if isinstance(v, list) else v)
              for k, v in values.items() if k in algo_fields - {"runner"}}
    if base is not None:
        return dataclasses.replace(base, runner=runner, **kwargs)
    return cfg_cls(runner=runner, **kwargs)


def cpu_devices_for_roles(args: argparse.Namespace, base: Any = None) -> None:
    """``--runner async``: on a CPU, give each role its own (forced) CPU device, unless
    XLA_FLAGS already sets a count. Must run before JAX starts its backend; the flag only
    concerns the CPU platform, so it changes nothing where JAX runs on an accelerator."""
    if runner_of(args, base) != "async":
        return
    resumed = base is not None and base.runner.name == "async"
    defaults = base.runner if resumed else AsyncConfig()
    roles = (getattr(args, "actor_devices", defaults.actor_devices)
             + getattr(args, "learner_devices", defaults.learner_devices))
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={roles}".strip()


def _algo_of(argv: list[str]) -> str:
    pre = Parser(prog="jaxrl-async", add_help=False)
    pre.add_argument("--algo", default="ppo", choices=sorted(algo_configs()))
    pre.add_argument("--resume", default=None)
    known, _ = pre.parse_known_args(argv)
    in_file = None if "--algo" in argv else options.config_algo(argv)
    if in_file is not None:
        return in_file
    if known.resume is not None and "--algo" not in argv:
        try:
            from jaxrl_async.run.train import load_config

            return load_config(known.resume).name
        except ValueError:
            pass  # reported when train() loads it
    return known.algo


def _fail(message: Any) -> int:
    """Print one line naming the flag (for a config field's error) and return exit code 2."""
    text = " ".join(str(message).split())
    field = _CONFIG_FIELD.search(text)
    if field and not text.startswith("--"):
        text = f"{_flag(field.group(1))}: {text}"
    print(f"error: {text}", file=sys.stderr)
    return 2


_CONFIG_FIELD = re.compile(r"^\w+Config\.(?:runner\.)?(\w+)")


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.algo_given = any(a == "--algo" or a.startswith("--algo=") for a in argv)
    return args

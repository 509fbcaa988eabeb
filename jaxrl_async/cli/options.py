"""The command line's options for settings files (``--config``) and experiment tracking
(``--track``): their flags, and what they turn into for ``cli.cmd_train`` and ``cli.cmd_sweep``;
``jaxrl-async presets``, the settings files that come with the package.
Nothing here imports wandb: ``tracking`` does, when a tracker run starts."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_config_option(parser: argparse.ArgumentParser, command: str) -> None:
    what = ("a run file: 'algo' and any config field, 'runner', 'seed' (a run directory's "
            "config.json is one)" if command == "train" else
            "a sweep file: 'base' (a run file's mapping or path), 'grid' or 'random', 'seeds', "
            "'num_samples', 'sample_seed', 'rank_by' (a sweep directory's config.json is one)")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help=f"settings from a YAML or JSON file, {what}; flags given with it "
                             "override its values (docs/config_files.md)")


def add_compile_cache_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compile-cache", default=None, metavar="DIR|off",
                        help="where compiled programs are kept for the next run (jax's "
                             "persistent compilation cache), or 'off' (default: "
                             "$JAXRL_ASYNC_COMPILE_CACHE, else $XDG_CACHE_HOME/jaxrl_async/xla; "
                             "a JAX_COMPILATION_CACHE_DIR you set wins)")


def use_compile_cache(args: argparse.Namespace) -> None:
    """``--compile-cache``: point the compilation cache there (and take it out of ``args``)."""
    where = vars(args).pop("compile_cache", None)
    if where is not None:
        from jaxrl_async.run.compile_cache import use_compile_cache as use

        use(where)


def add_tracking_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("experiment tracking (pip install 'jaxrl_async[wandb]')")
    group.add_argument("--track", action="store_true",
                       help="log to Weights & Biases (WANDB_MODE=offline: to <dir>/wandb, "
                            "no network)")
    group.add_argument("--wandb-project", default="jaxrl_async",
                       help="W&B project (default: 'jaxrl_async')")
    group.add_argument("--wandb-entity", default=None, help="W&B entity (default: yours)")


def config_algo(argv: list[str]) -> str | None:
    """The algorithm the ``--config`` file in ``argv`` names (``None``: no file, or one that
    does not read; that is reported when it is loaded)."""
    from jaxrl_async.run import config_files

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    path = pre.parse_known_args(argv)[0].config
    if path is None:
        return None
    try:
        data = config_files.read_file(path)
        if "base" in data:  # a sweep file
            return config_files.load_sweep_file(path).cfg.name
        return config_files.load_config_file(path)[0].name
    except ValueError:
        return None


def train_base(args: argparse.Namespace) -> tuple[Any, int]:
    """``cmd_train``'s base config (resumed run's, the ``--config`` file's, or ``None``) and
    seed (``--seed``, else the file's, else 0)."""
    from jaxrl_async.config.fields import check_seed
    from jaxrl_async.run import config_files
    from jaxrl_async.run.train import load_config

    file_seed = None
    if args.resume and args.config:
        raise ValueError("give --config or --resume, not both (a resumed run has its config)")
    if args.resume:
        base = load_config(args.resume)
    elif args.config:
        base, file_seed = config_files.load_config_file(args.config)
    else:
        base = None
    _same_algo(args, base)
    if args.seed is not None:
        check_seed(args.seed, "--seed")
    seed = args.seed if args.seed is not None else file_seed
    return base, 0 if seed is None else seed


def sweep_base(args: argparse.Namespace) -> Any:
    """``cmd_sweep``'s base config from the ``--config`` file (``None`` without one); fills
    the file's spaces and seeds into ``args`` where no flag gave them, and the defaults."""
    sweep_file = None
    if args.config:
        from jaxrl_async.run import config_files

        sweep_file = config_files.load_sweep_file(args.config)
        if not args.grid and not args.random:
            args.grid = [f"{k}={','.join(map(str, v))}" for k, v in sweep_file.grid.items()]
            args.random = [f"{k}={v}" for k, v in sweep_file.random.items()]
    for name, default in (("seeds", 2), ("num_samples", 16), ("sample_seed", 0),
                          ("rank_by", "final_return")):
        if getattr(args, name) is None:
            given = getattr(sweep_file, name, None)
            setattr(args, name, default if given is None else given)
    base = sweep_file.cfg if sweep_file else None
    _same_algo(args, base)
    return base


def _same_algo(args: argparse.Namespace, base: Any) -> None:
    if base is None or not args.algo_given or args.algo == base.name:
        return
    if getattr(args, "resume", None):
        raise ValueError(f"--algo {args.algo}: {Path(args.resume) / 'config.json'} is a "
                         f"{base.name} run; drop --algo to resume it")
    raise ValueError(f"--algo {args.algo} differs from the config's algorithm {base.name}")


def tracker(args: argparse.Namespace) -> Any:
    """A ``WandbSink`` left open for the evaluation (``--track``), or ``None``."""
    if not args.track:
        return None
    from jaxrl_async.run.tracking import WandbSink

    return WandbSink(project=args.wandb_project, entity=args.wandb_entity, keep_open=True)


def log_sweep(args: argparse.Namespace, out: Any, cfg: Any, spec: dict, result: Any) -> None:
    """``--track``: the sweep as one tracker run (``tracking.log_sweep``)."""
    if args.track:
        from jaxrl_async.run.tracking import log_sweep

        log_sweep(out, cfg, spec, result, project=args.wandb_project,
                  entity=args.wandb_entity, rank_by=args.rank_by)


ON_POLICY_DEFAULTS = ("ppo", "impala", "recurrent_ppo")
"""Algorithms whose defaults are tuned for CartPole (PureJaxRL's settings)."""


def defaults_hint(cfg: Any) -> str | None:
    """One line for a run of CartPole's defaults on a continuous-control env (no ``--config``):
    the presets made for continuous control, those of ``cfg.env`` first; ``None`` otherwise."""
    from jaxrl_async.run import config_files

    if cfg.name not in ON_POLICY_DEFAULTS or cfg.is_discrete:
        return None
    envs = {name: config_files.read_file(path).get("env")
            for name, path in config_files.presets().items()}
    same = [name for name, env in envs.items() if env == cfg.env]
    continuous = ["pendulum_ppo", "cleanrl_ppo_hopper"]
    names = same + [n for n in continuous if n not in same and n in envs]
    return (f"{cfg.title}'s defaults are PureJaxRL's CartPole settings, rarely right for "
            f"continuous control ({cfg.env}); start from a preset: "
            + ", ".join(f"--config {n}" + (f" ({envs[n]})" if envs[n] != cfg.env else "")
                        for n in names)
            + ", or --algo sac; jaxrl-async presets lists them all")


def cmd_presets(argv: list[str]) -> int:
    """``jaxrl-async presets``: the run files that come with the package, by name."""
    argparse.ArgumentParser(
        prog="jaxrl-async presets",
        description="The presets: settings files given by name (train --config NAME); "
                    "published/ ones are what make reproduce runs.").parse_args(argv)
    from jaxrl_async.run import config_files

    for name, path in config_files.presets().items():
        data = config_files.read_file(path)
        algo = data.get("algo") or data.get("_type", "?").removesuffix("Config").lower()
        steps = data.get("total_timesteps", "?")
        steps = f"{int(float(steps)):,}" if isinstance(steps, (int, float, str)) else steps
        where = path.relative_to(config_files.PRESETS.parent.parent)
        print(f"{name:34} {algo:8} {data.get('env', 'CartPole-v1'):26} {steps:>11} steps  "
              f"{where}")
    return 0

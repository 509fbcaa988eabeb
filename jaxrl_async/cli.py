"""The command line, generated from the config dataclasses (their fields and docstrings are the
one source of truth for flags and help).

    jaxrl-async train --algo ppo --env CartPole-v1 --runner sync --total-timesteps 5e5 --lr 3e-4
    jaxrl-async train --resume runs/ppo_CartPole-v1_sync_20250101-120000
    jaxrl-async sweep --algo ppo --grid lr=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01 --seeds 4
    jaxrl-async sweep --algo ppo --random lr=log:1e-4:1e-2 --num-samples 16 --seeds 2
    jaxrl-async eval runs/ppo_CartPole-v1_sync_20250101-120000 --episodes 20
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from jaxrl_async.config import AsyncConfig, SyncConfig, field_docs


def runner_configs() -> dict[str, type]:
    """``--runner`` choices."""
    return {"sync": SyncConfig, "async": AsyncConfig}


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
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or dataclasses.is_dataclass(f.default):
            continue
        default = f.default
        kind = "sweepable" if f.metadata.get("kind") == "hyper" else "static"
        text = f"{docs.get(f.name, '')} [{kind}] (default: {default!r})".replace("%", "%%")
        kw: dict[str, Any] = {"help": text, "default": argparse.SUPPRESS, "dest": f.name}
        if isinstance(default, bool):
            group.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, **kw)
        elif isinstance(default, tuple):
            group.add_argument(_flag(f.name), nargs="+", type=_number(int), **kw)
        elif isinstance(default, (int, float)):
            group.add_argument(_flag(f.name), type=_number(type(default)), **kw)
        else:
            group.add_argument(_flag(f.name), type=str, **kw)


def _config_parser(prog: str, description: str, algo: str) -> argparse.ArgumentParser:
    """A parser with ``--algo``, ``--runner`` and one flag per config field."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--algo", choices=sorted(algo_configs()), default=algo,
                        help=f"algorithm (default: {algo!r})")
    parser.add_argument("--runner", choices=sorted(runner_configs()), default=argparse.SUPPRESS,
                        help="runner (default: 'sync')")
    add_fields(parser.add_argument_group(f"{algo} options"), algo_configs()[algo], ("runner",))
    for name, cls in runner_configs().items():
        add_fields(parser.add_argument_group(f"--runner {name} options"), cls)
    return parser


def train_parser(algo: str) -> argparse.ArgumentParser:
    parser = _config_parser("jaxrl-async train", f"Train {algo.upper()}.", algo)
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    parser.add_argument("--run-dir", default=None,
                        help="where to write config, metrics, checkpoints and plots "
                             "(default: runs/<algo>_<env>_<runner>_<time>)")
    parser.add_argument("--resume", default=None, metavar="RUN_DIR",
                        help="continue the run in RUN_DIR from its newest checkpoint (its "
                             "config; only --checkpoint-every, --keep-checkpoints and "
                             "--tensorboard may be changed)")
    parser.add_argument("--eval-episodes", type=int, default=10,
                        help="greedy evaluation episodes on fresh envs after training "
                             "(0: none; default: 10)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar (default: on)")
    multi = parser.add_argument_group(
        "multi-process (multi-host) runs: one command per process, see "
        "docs/scaling.md")
    multi.add_argument("--distributed", action="store_true",
                       help="join a multi-process run (jax.distributed) before anything else; "
                            "missing values come from JAX_COORDINATOR_ADDRESS, "
                            "JAX_NUM_PROCESSES, JAX_PROCESS_ID, or SLURM/Open MPI detection")
    multi.add_argument("--coordinator-address", default=None, metavar="HOST:PORT",
                       help="process 0's address (implies --distributed)")
    multi.add_argument("--num-processes", type=int, default=None,
                       help="processes in the run (implies --distributed)")
    multi.add_argument("--process-id", type=int, default=None,
                       help="this process's index, 0 writes the run directory "
                            "(implies --distributed)")
    return parser


def wants_distributed(args: argparse.Namespace) -> bool:
    given = (args.coordinator_address, args.num_processes, args.process_id)
    return args.distributed or any(v is not None for v in given)


def join_distributed(args: argparse.Namespace) -> None:
    """``jra.distributed.initialize`` with the command line's values (must run before JAX
    starts its backend)."""
    from jaxrl_async import distributed

    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)


def sweep_parser(algo: str) -> argparse.ArgumentParser:
    parser = _config_parser(
        "jaxrl-async sweep",
        f"Sweep {algo.upper()}'s sweepable fields in one compile; the other flags set the base "
        "config.", algo)
    parser.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                        help="grid values of a sweepable field (repeat for a grid)")
    parser.add_argument("--random", action="append", default=[],
                        metavar="FIELD=log:LO:HI|uniform:LO:HI",
                        help="random search range of a sweepable field (repeat)")
    parser.add_argument("--num-samples", type=int, default=16,
                        help="points drawn for --random (default: 16)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per point (default: 2)")
    parser.add_argument("--sample-seed", type=int, default=0,
                        help="seed of the --random draws (default: 0)")
    parser.add_argument("--devices", type=int, default=None,
                        help="devices to spread the runs over (default: all local devices)")
    parser.add_argument("--out", default=None,
                        help="output directory (default: runs/sweep_<algo>_<env>_<time>)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar (default: on)")
    return parser


def eval_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="jaxrl-async eval",
        description="Evaluate a run directory's newest checkpoint on fresh envs.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (from train)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes (default: 10)")
    parser.add_argument("--stochastic", action="store_true",
                        help="sample actions instead of taking the policy's mode")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fresh envs")
    parser.add_argument("--step", type=int, default=None,
                        help="checkpoint (update number) to load (default: the newest)")
    parser.add_argument("--gif", default=None, metavar="PATH",
                        help="also render one episode to PATH (envs gymnax can draw)")
    return parser


def config_from_args(args: argparse.Namespace, base: Any = None) -> Any:
    """Build (and so validate) the config the parsed flags describe; with ``base``, the flags
    given change that config."""
    values = vars(args)
    default_runner = base.runner.name if base is not None else "sync"
    runner_name = values.get("runner", default_runner)
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
    if getattr(args, "runner", base.runner.name if base is not None else "sync") != "async":
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
    if known.resume is not None and "--algo" not in argv:
        try:
            from jaxrl_async.train import load_config

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


def nearest(word: str, choices: Any) -> str:
    """`` (did you mean X?)`` for the choices nearest ``word`` (ties all named), or ``""``."""
    scored = [(difflib.SequenceMatcher(None, word, str(c)).ratio(), str(c)) for c in choices]
    best = max((score for score, _ in scored), default=0.0)
    found = sorted(c for score, c in scored if score == best and score >= 0.6)
    return f" (did you mean {' or '.join(found)}?)" if found else ""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (the flag, what it allows) with the
    nearest flag or choice suggested, and exit code 2."""

    def error(self, message: str) -> NoReturn:
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$",
                          message)
        if choice:
            allowed = [c.strip(" '") for c in choice.group(3).split(",")]
            message += nearest(choice.group(2), allowed)
        elif re.match(r"argument \S+: invalid (int|float) value", message):
            message += ("; expected an integer (1000000 or 1e6)" if "int value" in message
                        else "; expected a number")
        elif message.startswith("unrecognized arguments:"):
            unknown = [a.split("=")[0] for a in message.split(":", 1)[1].split()
                       if a.startswith("--")]
            flags = [o for o in self._option_string_actions if o.startswith("--")]
            message += "".join(nearest(flag, flags) for flag in unknown[:1])
        print(f"{self.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)


def _print_eval(result: dict[str, Any]) -> None:
    mode = "greedy" if result["greedy"] else "stochastic"
    print(f"  evaluation ({mode}, {result['num_episodes']} episodes on fresh envs): "
          f"return {result['mean_return']:.1f} ± {result['std_return']:.1f}, "
          f"length {result['mean_length']:.1f}")


def _eval_record(result: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in result.items()}


def cmd_train(argv: list[str]) -> int:
    args = train_parser(_algo_of(argv)).parse_args(argv)
    from jaxrl_async import sinks
    from jaxrl_async.checkpoint import CheckpointError
    from jaxrl_async.distributed import is_main_process
    from jaxrl_async.evaluate import evaluate
    from jaxrl_async.runners.state import TrainingDiverged, TrainingInterrupted
    from jaxrl_async.train import default_run_dir, load_config, summary, train

    if wants_distributed(args):  # before anything starts JAX's backend
        if args.resume:
            return _fail("--resume: multi-process runs write no checkpoints to resume")
        cpu_devices_for_roles(args)
        join_distributed(args)
    try:
        base = load_config(args.resume) if args.resume else None
        if base is not None and args.algo != base.name:
            raise ValueError(f"--algo {args.algo}: {Path(args.resume) / 'config.json'} is a "
                             f"{base.name} run; drop --algo to resume it")
        cpu_devices_for_roles(args, base)
        cfg = config_from_args(args, base)
    except (ValueError, TypeError) as e:
        return _fail(e)
    run_dir = Path(args.resume or args.run_dir or default_run_dir(cfg))
    try:
        result = train(cfg, seed=args.seed, run_dir=None if args.resume else run_dir,
                       resume=args.resume, progress=args.progress)
    except TrainingDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        if e.last_checkpoint is not None:
            print(f"  continue from it with: jaxrl-async train --resume {run_dir}  (the same "
                  "config repeats the same updates: for another outcome start a new run, e.g. "
                  "with a smaller --lr)", file=sys.stderr)
        return 3
    except TrainingInterrupted as e:
        done = int(e.result.state.update)
        print(f"\ninterrupted after update {done} of {cfg.num_updates}; checkpoint written to "
              f"{run_dir / 'checkpoints' / str(done)}\n  continue with: jaxrl-async train "
              f"--resume {run_dir}", file=sys.stderr)
        return 130
    except (CheckpointError, ValueError) as e:
        return _fail(e)
    s = summary(cfg, result)
    print(f"\n{s['algo'].upper()} on {s['env']} ({s['runner']} runner), "
          f"{s['total_timesteps']:,} steps")
    print(f"  final return (episodes ended in the last 10 updates): {s['final_return']:.1f}")
    if s["sps"] is not None:
        collected = ("" if s["sps_collected"] is None
                     else f" (collected: {s['sps_collected']:,.0f})")
        print(f"  SPS: {s['sps']:,.0f}{collected}   compile: {s['compile_s']:.1f} s   "
              f"train: {s['train_s']:.1f} s")
    if args.eval_episodes > 0:
        evaluation = evaluate(result, cfg, args.eval_episodes, greedy=True, seed=args.seed)
        _print_eval(evaluation)
        if is_main_process():  # only the main process writes
            sinks.write_json(run_dir / "eval.json", _eval_record(evaluation))
    if is_main_process():
        print(f"  run directory: {run_dir}")
    return 0


def _parse_values(cfg: Any, name: str, text: str) -> list[Any]:
    kind = type(getattr(cfg, name))
    try:
        return [_number(kind)(v) for v in text.split(",") if v]
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise ValueError(f"--grid {name}={text}: {e}") from None


def _parse_range(text: str) -> tuple[str, Any]:
    from jaxrl_async.sweep import LogUniform, Uniform

    name, _, spec = text.partition("=")
    parts = spec.split(":")
    kinds = {"log": LogUniform, "loguniform": LogUniform, "uniform": Uniform}
    if len(parts) != 3 or parts[0] not in kinds:
        raise ValueError(f"--random {text}: expected FIELD=log:LO:HI or FIELD=uniform:LO:HI")
    return name, kinds[parts[0]](float(parts[1]), float(parts[2]))


def cmd_sweep(argv: list[str]) -> int:
    args = sweep_parser(_algo_of(argv)).parse_args(argv)
    from jaxrl_async import sinks
    from jaxrl_async.config import to_dict
    from jaxrl_async.sweep import check_sweepable, random_search, sweep, use_cpu_cores

    use_cpu_cores()

    try:
        cfg = config_from_args(args)
        if bool(args.grid) == bool(args.random):
            raise ValueError("give either --grid FIELD=V1,V2 ... or --random FIELD=log:LO:HI ...")
        spec: dict[str, Any] = {}
        for item in args.grid + args.random:
            name = item.partition("=")[0]
            check_sweepable(cfg, [name])
            if name in spec:
                raise ValueError(f"{name} is given twice")
            spec[name] = (_parse_values(cfg, name, item.partition("=")[2]) if args.grid
                          else _parse_range(item)[1])
        if args.grid:
            result = sweep(cfg, spec, args.seeds, num_devices=args.devices,
                              progress=args.progress)
        else:
            result = random_search(cfg, spec, args.num_samples, args.seeds,
                                      seed=args.sample_seed, num_devices=args.devices,
                                      progress=args.progress)
    except ValueError as e:
        return _fail(e)

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or f"runs/sweep_{cfg.name}_{cfg.env}_{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    sinks.write_json(out / "config.json", {
        **to_dict(cfg), "sweep": {"grid" if args.grid else "random": {
            k: (list(v) if args.grid else {"kind": type(v).__name__, "low": v.low,
                                           "high": v.high}) for k, v in spec.items()},
            "seeds": list(result.seeds), "sample_seed": args.sample_seed}})
    result.to_csv(out / "results.csv")
    best = result.best()
    sinks.write_json(out / "best.json", {
        "index": best["config"], **{k: v for k, v in best.items() if k not in ("cfg", "config")},
        "config": to_dict(best["cfg"])})
    result.plot(path=out / "sweep.png")
    t = result.timing
    print(f"\n{len(result.configs)} configs x {len(result.seeds)} seeds = {t['runs']} runs on "
          f"{t['devices']} device(s), one compile: {t['compile_s']:.1f} s, train "
          f"{t['train_s']:.1f} s, {t['sps']:,.0f} SPS in all")
    rows = sorted(result.summary(), key=lambda r: -_finite(r["final_return"]))
    for row in rows[:10]:
        values = "  ".join(f"{k}={row[k]:g}" for k in result.fields)
        print(f"  {values}  final return {row['final_return']:.1f} ± "
              f"{row['final_return_std']:.1f}")
    best_values = ", ".join(f"{k}={best[k]:g}" for k in result.fields)
    print(f"  best: {best_values} (final return {best['final_return']:.1f})")
    print(f"  results: {out / 'results.csv'}, plot: {out / 'sweep.png'}")
    return 0


def _finite(x: float) -> float:
    return x if x == x else float("-inf")


def cmd_eval(argv: list[str]) -> int:
    args = eval_parser().parse_args(argv)
    from jaxrl_async import checkpoint, sinks
    from jaxrl_async.evaluate import evaluate, save_gif
    from jaxrl_async.train import load_config

    try:
        cfg = load_config(args.run_dir)
        state = checkpoint.restore(args.run_dir, cfg, args.step)
        result = evaluate(state, cfg, args.episodes, greedy=not args.stochastic, seed=args.seed)
    except ValueError as e:  # CheckpointError is a ValueError
        return _fail(e)
    print(f"{cfg.name.upper()} on {cfg.env}, checkpoint at update {int(state.update)} of "
          f"{args.run_dir}")
    _print_eval(result)
    record = {**_eval_record(result), "update": int(state.update)}
    sinks.write_json(Path(args.run_dir) / "eval.json", record)
    if args.gif:
        path = save_gif(state, cfg, args.gif, greedy=not args.stochastic, seed=args.seed)
        print(f"  episode GIF: {path}")
    print(json.dumps({k: record[k] for k in ("mean_return", "std_return", "num_episodes")}))
    return 0


COMMANDS = {
    "train": (cmd_train, "train an agent, writing a run directory"),
    "sweep": (cmd_sweep, "sweep hyperparameters x seeds in one compile"),
    "eval": (cmd_eval, "evaluate a run directory's checkpoint on fresh envs"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        lines = [f"  {name:6} {text}" for name, (_, text) in COMMANDS.items()]
        asked = bool(argv) and argv[0] in ("-h", "--help")
        if argv and not asked:
            print(f"jaxrl-async: error: unknown command {argv[0]!r}, choose from "
                  f"{', '.join(COMMANDS)}{nearest(argv[0], COMMANDS)}", file=sys.stderr)
            return 2
        print("usage: jaxrl-async {" + ",".join(COMMANDS) + "} [--help] ...\n\ncommands:\n"
              + "\n".join(lines), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    return COMMANDS[argv[0]][0](argv[1:])


if __name__ == "__main__":
    sys.exit(main())

"""The command line's parsers, generated from the config dataclasses (their fields and
docstrings are the one source of truth for flags and help); ``cli`` runs the commands."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
from typing import Any, NoReturn

from jaxrl_async.cli import options
from jaxrl_async.config.shared import AsyncConfig, SyncConfig, field_docs
from jaxrl_async.run.sinks import SCORES


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


def nearest(word: str, choices: Any) -> str:
    """`` (did you mean X?)`` for the choices nearest ``word`` (ties all named), or ``""``."""
    scored = [(difflib.SequenceMatcher(None, word, str(c)).ratio(), str(c)) for c in choices]
    best = max((score for score, _ in scored), default=0.0)
    found = sorted(c for score, c in scored if score == best and score >= 0.6)
    return f" (did you mean {' or '.join(found)}?)" if found else ""


OTHER_NAMES = {  # flags of other libraries (CleanRL, Stable-Baselines3) -> ours
    "--learning-rate": "--lr", "--clip-coef": "--clip-eps", "--clip-range": "--clip-eps",
    "--norm-adv": "--normalize-advantages", "--clip-vloss": "--clip-value",
    "--env-id": "--env", "--n-envs": "--num-envs", "--n-steps": "--num-steps",
    "--n-epochs": "--update-epochs", "--total-steps": "--total-timesteps",
}


def other_name(flag: str, flags: Any) -> str:
    """`` (did you mean --lr? ...)`` for a flag another library spells differently."""
    ours = OTHER_NAMES.get(flag)
    if ours is None or ours not in flags:
        return ""
    return f" (did you mean {ours}? {flag} is another library's name for it)"


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
            message += "".join(other_name(flag, flags) or nearest(flag, flags)
                               for flag in unknown[:1])
        print(f"{self.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)


def _config_parser(prog: str, description: str, algo: str,
                   skip: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """A parser with ``--algo``, ``--runner`` and one flag per config field (but ``skip``)."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--algo", choices=sorted(algo_configs()), default=algo,
                        help=f"algorithm (default: {algo!r})")
    parser.add_argument("--runner", choices=sorted(runner_configs()), default=argparse.SUPPRESS,
                        help="runner (default: 'async' for a host env, gymnasium:<id> or "
                             "envpool:<id>; else 'sync')")
    add_fields(parser.add_argument_group(f"{algo} options"), algo_configs()[algo],
               ("runner", *skip))
    for name, cls in runner_configs().items():
        add_fields(parser.add_argument_group(f"--runner {name} options"), cls)
    return parser


def train_parser(algo: str) -> argparse.ArgumentParser:
    parser = _config_parser("jaxrl-async train", f"Train {algo.upper()}.", algo,
                            skip=("eval_episodes",))
    options.add_config_option(parser, "train")
    parser.add_argument("--seed", type=int, default=None,
                        help="PRNG seed (default: the --config file's, else 0)")
    parser.add_argument("--run-dir", default=None,
                        help="where to write config, metrics, checkpoints and plots "
                             "(default: runs/<algo>_<env>_<runner>_<time>)")
    parser.add_argument("--resume", default=None, metavar="RUN_DIR",
                        help="continue the run in RUN_DIR from its newest checkpoint (its "
                             "config; only --checkpoint-every, --keep-checkpoints and "
                             "--tensorboard may be changed, and --total-timesteps: see "
                             "--extend; a multi-process run: on as many processes, with as "
                             "many devices each). A run stopped by SIGTERM exits with 75 "
                             "after a final checkpoint: resume it (docs/checkpoints.md)")
    parser.add_argument("--extend", action="store_true",
                        help="with --resume and another --total-timesteps: re-plan the "
                             "schedules over the budget (lr annealing, epsilon decay) for the "
                             "new one (docs/checkpoints.md)")
    parser.add_argument("--eval-episodes", type=int, default=argparse.SUPPRESS,
                        dest="final_eval_episodes",
                        help="episodes of the final evaluation on fresh envs, written to "
                             "eval.json (0: none after training; default: 10): greedy, after "
                             "training; with --eval-every, the episodes of each evaluation "
                             "during training (the config's eval_episodes), the last of which "
                             "is the final evaluation")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar (default: on)")
    options.add_compile_cache_option(parser)
    options.add_tracking_options(parser)
    add_distributed_options(parser, "the run directory")
    return parser


def add_distributed_options(parser: argparse.ArgumentParser, writes: str) -> None:
    """``--distributed``, ``--coordinator-address``, ``--num-processes``, ``--process-id``."""
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
                       help=f"this process's index, 0 writes {writes}"
                            + ("; every process writes its part of each checkpoint there, on "
                               "a file system all hosts share" if writes == "the run directory"
                               else "") + " (implies --distributed)")


def sweep_parser(algo: str) -> argparse.ArgumentParser:
    parser = _config_parser(
        "jaxrl-async sweep",
        f"Sweep {algo.upper()}'s sweepable fields in one compile; the other flags set the base "
        "config.", algo)
    options.add_config_option(parser, "sweep")
    parser.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                        help="grid values of a sweepable field (repeat for a grid)")
    parser.add_argument("--random", action="append", default=[],
                        metavar="FIELD=log:LO:HI|uniform:LO:HI",
                        help="random search range of a sweepable field (repeat)")
    parser.add_argument("--num-samples", type=int, default=None,
                        help="points drawn for --random (default: 16)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per point (default: 2)")
    parser.add_argument("--sample-seed", type=int, default=None,
                        help="seed of the --random draws (default: 0)")
    parser.add_argument("--rank-by", default=None,
                        choices=SCORES,
                        help="what picks the best config (best.json), averaged over seeds: "
                             "final_return (the episodes that ended in each run's last 10 "
                             "updates, or as many as hold one episode of the env's time limit), "
                             "auc (all the run's episodes) or final_eval_return (the "
                             "evaluation after the last update: needs --eval-every) "
                             "(default: final_return)")
    parser.add_argument("--devices", type=int, default=None,
                        help="devices to spread the runs over (default: all devices, of every "
                             "process in a multi-process sweep)")
    parser.add_argument("--runs-per-chunk", type=int, default=None, metavar="N",
                        help="train N runs at a time (rounded up to a multiple of the "
                             "devices), each chunk saved to --out when done (default: all at "
                             "once)")
    parser.add_argument("--out", default=None,
                        help="output directory (default: runs/sweep_<algo>_<env>_<time>)")
    parser.add_argument("--resume", default=None, metavar="SWEEP_DIR",
                        help="continue the sweep in SWEEP_DIR: its saved chunks are loaded, "
                             "the others trained (its config.json and --runs-per-chunk)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar (default: on)")
    options.add_compile_cache_option(parser)
    options.add_tracking_options(parser)
    add_distributed_options(parser, "the sweep directory")
    return parser


def eval_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="jaxrl-async eval",
        description="Evaluate a run directory's newest checkpoint on fresh envs (appends a "
                    "line to RUN_DIR/evals.jsonl).")
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

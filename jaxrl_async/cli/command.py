"""The command line, generated from the config dataclasses (their fields and docstrings are the
one source of truth for flags and help).

    jaxrl-async train --algo ppo --env CartPole-v1 --runner sync --total-timesteps 5e5 --lr 3e-4
    jaxrl-async train --resume runs/ppo_CartPole-v1_sync_20250101-120000
    jaxrl-async train --config jaxrl_async/presets/cartpole_ppo.yaml --lr 1e-3 --track
    jaxrl-async sweep --algo ppo --grid lr=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01 --seeds 4
    jaxrl-async sweep --algo ppo --random lr=log:1e-4:1e-2 --num-samples 16 --seeds 2
    jaxrl-async pbt --algo ppo --space lr=log:1e-4:1e-2 --population 16 --ready-every 10
    jaxrl-async halving --algo ppo --space lr=log:1e-4:1e-2 --population 16 --eta 2 --rungs 3
    jaxrl-async tune --algo ppo --space lr=log:1e-4:1e-2 --trials 64 --batch 16 --test-seeds 3
    jaxrl-async eval runs/ppo_CartPole-v1_sync_20250101-120000 --episodes 20
"""

from __future__ import annotations

import argparse
import datetime
import sys
import warnings
from pathlib import Path
from typing import Any

from jaxrl_async.cli import options
from jaxrl_async.cli.args import (
    _algo_of,
    _fail,
    _parse,
    config_from_args,
    cpu_devices_for_roles,
    join_distributed,
    wants_distributed,
)
from jaxrl_async.cli.parsers import (  # noqa: F401 - the parsers, importable from here as before
    Parser,
    _flag,
    _number,
    add_fields,
    algo_configs,
    eval_parser,
    nearest,
    runner_configs,
    sweep_parser,
    train_parser,
)

EXIT_DIVERGED = 3
"""``train`` stopped because the run went NaN or inf (the newest finite checkpoint is kept)."""
EXIT_INTERRUPTED = 130
"""``train`` stopped by Ctrl-C after writing a final checkpoint (the shell's 128 + SIGINT)."""
EXIT_PREEMPTED = 75
"""``train`` stopped by SIGTERM (a scheduler's preemption notice) after writing a final
checkpoint: resume it with ``--resume RUN_DIR``. A requeue script tests for this status. It is
sysexits.h's ``EX_TEMPFAIL`` ("try again later"): not 0, which a scheduler counts as a job done
(the run is not), not 1 or 2 (a crash, bad arguments: requeueing those would repeat them), and
not 143 (128 + SIGTERM), what a process killed by SIGTERM before it could save returns, so
that a requeue on 75 never loops over a run that saves nothing (docs/scaling.md)."""


def cmd_train(argv: list[str]) -> int:
    args = _parse(train_parser(_algo_of(argv)), argv)
    options.use_compile_cache(args)
    final_episodes = vars(args).pop("final_eval_episodes", None)  # not a config field
    if final_episodes is not None and final_episodes < 0:
        return _fail(f"--eval-episodes: must be >= 0 (0: no evaluation after training), got "
                     f"{final_episodes}")
    if final_episodes is not None and final_episodes > 0:  # given: the config's too
        args.eval_episodes = final_episodes
    tracker = options.tracker(args)  # --track: kept open for the evaluation
    try:
        return _train(args, tracker, 10 if final_episodes is None else final_episodes)
    finally:
        if tracker is not None:
            tracker.finish()


def _train(args: argparse.Namespace, tracker: Any, final_episodes: int) -> int:
    from jaxrl_async.run import sinks
    from jaxrl_async.run.checkpoint import CheckpointError
    from jaxrl_async.run.distributed import is_main_process
    from jaxrl_async.run.train import (
        PartialUpdateWarning,
        default_run_dir,
        no_episode_note,
        partial_update_note,
        summary,
        train,
    )
    from jaxrl_async.runners.state import TrainingDiverged, TrainingInterrupted

    if args.extend and not args.resume:
        return _fail("--extend continues a run: it needs --resume RUN_DIR")
    if wants_distributed(args):  # before anything starts JAX's backend
        cpu_devices_for_roles(args)
        join_distributed(args)
    try:
        base, args.seed = options.train_base(args)
        cpu_devices_for_roles(args, base)
        cfg = config_from_args(args, base)
    except (ValueError, TypeError) as e:
        return _fail(e)
    if base is None:
        hint = options.defaults_hint(cfg)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
    run_dir = Path(args.resume or args.run_dir or default_run_dir(cfg))
    note = partial_update_note(cfg)
    if note and (not args.resume or cfg.total_timesteps != base.total_timesteps):
        print(f"note: {note}", file=sys.stderr)  # once, and not again on resume
    try:
        with warnings.catch_warnings():  # said above, as one line
            warnings.simplefilter("ignore", PartialUpdateWarning)
            result = train(cfg, seed=args.seed, run_dir=None if args.resume else run_dir,
                           resume=args.resume, extend=args.extend, progress=args.progress,
                           callbacks=[tracker] if tracker is not None else [])
    except TrainingDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        if e.last_checkpoint is not None:
            print(f"  continue from it with: jaxrl-async train --resume {run_dir}  (the same "
                  "config repeats the same updates: for another outcome start a new run, e.g. "
                  "with a smaller --lr)", file=sys.stderr)
        return EXIT_DIVERGED
    except TrainingInterrupted as e:
        done = int(e.result.state.update)
        why = "stopped by SIGTERM (preemption)" if e.preempted else "interrupted"
        print(f"\n{why} after update {done} of {cfg.num_updates}; checkpoint written to "
              f"{run_dir / 'checkpoints' / str(done)}\n  continue with: jaxrl-async train "
              f"--resume {run_dir}", file=sys.stderr)
        return EXIT_PREEMPTED if e.preempted else EXIT_INTERRUPTED
    except (CheckpointError, ValueError) as e:
        return _fail(e)
    s = summary(cfg, result)
    print(f"\n{cfg.title} on {s['env']} ({s['runner']} runner), {s['total_timesteps']:,} steps")
    final = s["final_return"]
    print(f"  final return (episodes ended in the last {s['final_return_updates']} updates): "
          + (sinks.format_return(final) if final == final else f"none: {no_episode_note(cfg)}"))
    if s["sps"] is not None:
        print(f"  SPS: {s['sps']:,.0f} trained on   compile: {s['compile_s']:.1f} s   "
              f"train: {s['train_s']:.1f} s")
        extra = s.get("env_steps_collected", 0) - s.get("env_steps_trained", 0)
        if extra > 0:  # free-running: the actors ran ahead of the learner
            print(f"  collected {s['sps_collected']:,.0f} env steps/s, {extra:,} more than were "
                  f"trained on: the free-running actors ran ahead of the learner; "
                  f"{s['env_steps_dropped']:,} were dropped as staler than max_staleness="
                  f"{cfg.runner.max_staleness} updates, {s['env_steps_queued']:,} still queued "
                  "when training ended")
    if cfg.eval_every or final_episodes > 0:
        _final_evaluation(cfg, result, s, final_episodes, args.seed, tracker, run_dir)
    if is_main_process():
        print(f"  run directory: {run_dir}")
    return 0


def _final_evaluation(cfg: Any, result: Any, s: dict, episodes: int, seed: int, tracker: Any,
                      run_dir: Path) -> None:
    """Print the run's one final evaluation and write it to ``eval.json``: with ``eval_every``
    the evaluation after the last update, made in training (``summary.json``'s
    ``final_eval_return``) and made again here with its keys for the per-episode figures (the
    same episodes); else ``episodes`` greedy episodes on fresh envs from ``seed``. ``episodes``
    0: none after training (with ``eval_every``, the one in training is printed)."""
    from jaxrl_async.run import sinks
    from jaxrl_async.run.distributed import is_main_process
    from jaxrl_async.run.evaluate import evaluate
    from jaxrl_async.runners.common import eval_key

    done = int(result.state.update)
    if cfg.eval_every:
        what = (f"after update {done}, made in training: {cfg.eval_episodes} "
                f"{'greedy' if cfg.eval_greedy else 'sampled'} episodes on fresh envs")
        if episodes == 0:
            print(f"  final evaluation ({what}): return "
                  f"{sinks.format_return(s['final_eval_return'])}")
            return
        evaluation = evaluate(result, cfg, cfg.eval_episodes, greedy=cfg.eval_greedy,
                              key=eval_key(result.state.key, done))
    else:
        what = f"after training: {episodes} greedy episodes on fresh envs, seed {seed}"
        evaluation = evaluate(result, cfg, episodes, greedy=True, seed=seed)
    print(f"  final evaluation ({what}): return {sinks.format_return(evaluation['mean_return'])}"
          f" ± {sinks.format_return(evaluation['std_return'])}, length "
          f"{evaluation['mean_length']:.1f}")
    if tracker is not None:
        tracker.log_evaluation(evaluation)
    if is_main_process():  # only the main process writes
        sinks.write_json(run_dir / "eval.json", {
            **evaluation, "update": done, "in_training": bool(cfg.eval_every),
            "seed": None if cfg.eval_every else seed})


def cmd_sweep(argv: list[str]) -> int:
    from jaxrl_async.run.distributed import is_main_process
    from jaxrl_async.search.sweep import random_search, sweep, use_cpu_cores

    use_cpu_cores()  # first: reading a --config file imports gymnax, which starts JAX's backend
    from jaxrl_async.cli import sweep as cli_sweep

    try:
        argv = cli_sweep.prepare(argv)  # jax.distributed, then --resume's sweep file
    except ValueError as e:
        return _fail(e)
    args = _parse(sweep_parser(_algo_of(argv)), argv)
    options.use_compile_cache(args)
    try:
        cfg = config_from_args(args, options.sweep_base(args))
        spec = cli_sweep.spaces(cfg, args)
        if args.rank_by == "final_eval_return" and not cfg.eval_every:
            raise ValueError("--rank-by final_eval_return: the runs are evaluated only with "
                             "--eval-every N (updates between evaluations)")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(args.out or args.resume or f"runs/sweep_{cfg.name}_{cfg.env}_{stamp}")
        kwargs = dict(num_devices=args.devices, progress=args.progress, checkpoint_dir=out,
                      runs_per_chunk=cli_sweep.checkpointing(args, out))
        cli_sweep.start_sweep(out, cfg, spec, args)
        if args.grid:
            result = sweep(cfg, spec, args.seeds, **kwargs)
        else:
            result = random_search(cfg, spec, args.num_samples, args.seeds,
                                   seed=args.sample_seed, **kwargs)
    except ValueError as e:
        return _fail(e)
    try:
        best: dict[str, Any] | str = result.best(args.rank_by)
    except ValueError as e:  # no config has a score: said why, and no best.json
        best = str(e).partition(": ")[2]
    if not is_main_process():  # every process holds the whole result; process 0 writes
        return 0
    cli_sweep.write_sweep(out, cfg, spec, result, args, best if isinstance(best, dict) else None)
    cli_sweep.report(out, cfg, result, args.rank_by, best)
    options.log_sweep(args, out, cfg, cli_sweep.tracked_spaces(spec, result, args), result)
    return 0


def cmd_population(kind: str, argv: list[str]) -> int:
    """``jaxrl-async pbt`` and ``jaxrl-async halving`` (``cli_population``)."""
    from jaxrl_async.cli import population as cli_population
    from jaxrl_async.run.distributed import is_main_process
    from jaxrl_async.search.population_checkpoint import read_meta

    args = _parse(cli_population.population_parser(kind, _algo_of(argv)), argv)
    if wants_distributed(args):  # before anything starts JAX's backend
        join_distributed(args)
    try:
        if args.resume:
            cfg = read_meta(args.resume)[0]
            out = Path(args.out or args.resume)
        else:
            cfg = config_from_args(args)
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            out = Path(args.out or f"runs/{kind}_{cfg.name}_{cfg.env}_{stamp}")
        result = cli_population.run(kind, args, cfg, out)
    except ValueError as e:  # a CheckpointError too
        return _fail(e)
    best = cli_population.write(out, result)
    if not is_main_process():  # every process trained; process 0 reports and logs
        return 0
    cli_population.report(out, result, best)
    if args.track:
        from jaxrl_async.run.tracking import log_population

        log_population(out, result.base, cli_population.tracked(result), result,
                       project=args.wandb_project, entity=args.wandb_entity)
    return 0


def cmd_tune(argv: list[str]) -> int:
    """``jaxrl-async tune`` (``cli/tune.py``): Optuna, a batch of trials per compiled program."""
    from jaxrl_async.cli import tune

    args = _parse(tune.tune_parser(_algo_of(argv)), argv)
    options.use_compile_cache(args)
    try:
        result, kept, spec, out = tune.run(args)
    except (ValueError, ImportError) as e:
        return _fail(e)
    tune.report(out, result, tune.write(out, result, kept, spec), kept)
    return 0


def cmd_eval(argv: list[str]) -> int:
    args = eval_parser().parse_args(argv)
    from jaxrl_async.run import checkpoint, sinks
    from jaxrl_async.run.evaluate import check_renderer, evaluate, save_gif
    from jaxrl_async.run.train import load_config

    try:
        cfg = load_config(args.run_dir)
        if args.gif:
            check_renderer(cfg.env)  # before evaluating: a missing extra fails at once
        state = checkpoint.restore(args.run_dir, cfg, args.step)
        result = evaluate(state, cfg, args.episodes, greedy=not args.stochastic, seed=args.seed)
    except ValueError as e:  # CheckpointError is a ValueError
        return _fail(e)
    print(f"{cfg.title} on {cfg.env}, checkpoint at update {int(state.update)} of "
          f"{args.run_dir}")
    mode = "greedy" if result["greedy"] else "stochastic"
    print(f"  evaluation ({mode}, {result['num_episodes']} episodes on fresh envs): return "
          f"{sinks.format_return(result['mean_return'])} ± "
          f"{sinks.format_return(result['std_return'])}, length {result['mean_length']:.1f}")
    if args.gif:
        path = save_gif(state, cfg, args.gif, greedy=not args.stochastic, seed=args.seed)
        print(f"  episode GIF: {path}")
    # appended, one line per evaluation: train's own eval.json is never overwritten
    record = {**result, "update": int(state.update), "seed": args.seed}
    sinks.append_jsonl(Path(args.run_dir) / "evals.jsonl", record)
    print(sinks.to_json({k: record[k] for k in ("mean_return", "std_return", "num_episodes")}))
    return 0


COMMANDS = {
    "train": (cmd_train, "train an agent, writing a run directory"),
    "sweep": (cmd_sweep, "sweep hyperparameters x seeds in one compile"),
    "pbt": (lambda argv: cmd_population("pbt", argv),
            "population-based training: losers copy winners inside one compile"),
    "halving": (lambda argv: cmd_population("halving", argv),
                "successive halving: the top 1/eta go on, inside one compile"),
    "tune": (cmd_tune, "Optuna's samplers, a batch of trials per compiled program"),
    "eval": (cmd_eval, "evaluate a run directory's checkpoint on fresh envs"),
    "presets": (options.cmd_presets, "list the settings files that come with the package"),
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


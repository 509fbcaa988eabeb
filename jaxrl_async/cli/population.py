"""The parts of ``jaxrl-async pbt`` and ``jaxrl-async halving`` (``cli.cmd_population``): the
parsers, the search space from ``--space`` flags, the run (or ``--resume``), the population
directory (``members.csv``, ``population.png``, ``lineage.json``, ``best.json``, and the
checkpoint ``population.json`` + ``checkpoint.npz``) and the printed table."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from jaxrl_async.cli import options
from jaxrl_async.cli.parsers import _config_parser, add_distributed_options

KINDS = {"pbt": "population-based training", "halving": "successive halving"}


def population_parser(kind: str, algo: str) -> argparse.ArgumentParser:
    parser = _config_parser(
        f"jaxrl-async {kind}",
        f"{KINDS[kind].capitalize()} of {algo.upper()} in one compiled program: a population "
        "drawn from --space, the losers replaced by copies of the winners inside the program; "
        "the other flags set the base config.", algo)
    parser.add_argument("--space", action="append", default=[],
                        metavar="FIELD=log:LO:HI|uniform:LO:HI|V1,V2,...",
                        help="a sweepable field's range (log or linear) or choices (repeat)")
    parser.add_argument("--population", type=int, default=16,
                        help="members per seed (default: 16)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="independent populations, one per seed (default: 1)")
    parser.add_argument("--sample-seed", type=int, default=0,
                        help="seed of the initial draw and of the exploit steps (default: 0)")
    if kind == "pbt":
        parser.add_argument("--ready-every", type=int, default=10,
                            help="updates between exploit steps (default: 10)")
        parser.add_argument("--fraction", type=float, default=0.25,
                            help="the bottom fraction copies the top fraction (default: 0.25)")
        parser.add_argument("--resample-prob", type=float, default=0.25,
                            help="chance a copied field is drawn afresh instead of perturbed "
                                 "(default: 0.25)")
        parser.add_argument("--factor", type=float, default=1.2,
                            help="a perturbation multiplies or divides by it (default: 1.2)")
    else:
        parser.add_argument("--eta", type=int, default=2,
                            help="each rung keeps the top 1/eta (default: 2)")
        parser.add_argument("--rungs", type=int, default=3,
                            help="rungs (rungs - 1 cuts, at T/eta**(rungs-1), ...; default: 3)")
    parser.add_argument("--score", choices=("return", "eval"), default="return",
                        help="what ranks the members: the mean return of the episodes that "
                             "ended since the last exploit step, or the last evaluation in it "
                             "(needs --eval-every) (default: return)")
    parser.add_argument("--devices", type=int, default=None,
                        help="devices to shard the members over (default: all, of every "
                             "process under jax.distributed; the members must divide over "
                             "them; with --resume: as many as the checkpoint's run had)")
    parser.add_argument("--checkpoint-segments", type=int, default=None, metavar="K",
                        help="checkpoint the population every K segments (default: only at "
                             "the end)")
    parser.add_argument("--resume", default=None, metavar="DIR",
                        help="continue the population checkpointed in DIR (its own settings)")
    parser.add_argument("--out", default=None,
                        help=f"output directory (default: runs/{kind}_<algo>_<env>_<time>)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar (default: on)")
    options.add_tracking_options(parser)
    add_distributed_options(parser, "the population directory (members: sharded over the "
                                    "devices of all processes)")
    return parser


def space_of(cfg: Any, items: list[str]) -> Any:
    """The ``--space`` items as a checked ``Space``; errors name the item."""
    from jaxrl_async.cli.sweep import parse_space
    from jaxrl_async.search.population import Space

    return Space.of(cfg, parse_space(cfg, items, Space.of))


def run(kind: str, args: argparse.Namespace, cfg: Any, out: Path) -> Any:
    """Train the population the flags describe (or resume ``args.resume``), checkpointed in
    ``out``."""
    import jaxrl_async as jra

    if args.resume:
        return jra.resume_population(args.resume, num_devices=args.devices,
                                     progress=args.progress)
    space = space_of(cfg, args.space)
    common = dict(population=args.population, seeds=args.seeds, seed=args.sample_seed,
                  score=args.score, num_devices=args.devices, checkpoint_dir=out,
                  checkpoint_every=args.checkpoint_segments, progress=args.progress)
    if kind == "pbt":
        return jra.pbt(cfg, space, ready_every=args.ready_every, fraction=args.fraction,
                       resample_prob=args.resample_prob, factor=args.factor, **common)
    return jra.successive_halving(cfg, space, eta=args.eta, rungs=args.rungs, **common)


def write(out: Path, result: Any) -> dict[str, Any]:
    """The population directory's result files (process 0 alone writes them); returns the
    best member's row."""
    import numpy as np

    from jaxrl_async.config.shared import to_dict
    from jaxrl_async.run import sinks
    from jaxrl_async.run.distributed import is_main_process
    from jaxrl_async.search.population_result import shortest

    best = result.best()
    if not is_main_process():
        return best
    out.mkdir(parents=True, exist_ok=True)
    result.to_csv(out / "members.csv")
    result.plot(path=out / "population.png")
    lineage = {k: np.vectorize(shortest)(v).tolist() if np.issubdtype(v.dtype, np.floating)
               else v.tolist() for k, v in result.lineage.items()}
    sinks.write_json(out / "lineage.json", {"seeds": list(result.seeds), **lineage})
    sinks.write_json(out / "best.json", {**to_dict(best["cfg"]), "from_population": {
        "dir": str(out), "member": best["member"], "seed": best["seed"],
        "final_return": best["final_return"]}})
    return best


def report(out: Path, result: Any, best: dict[str, Any]) -> None:
    from jaxrl_async.run.sinks import format_return

    t, s = result.timing, result.schedule
    speed = (f"train {t['train_s']:.1f} s, {t['sps']:,.0f} SPS in all" if t["steps_trained"]
             else "nothing left to train: the population had finished")
    print(f"\n{s.kind}: {s.population} members x {len(result.seeds)} seeds = {t['runs']} runs, "
          f"{t['exploits']} exploit steps in the program; compile {t['compile_s']:.1f} s, "
          f"{speed}")
    print(f"  final return: the mean return of the episodes that ended in each member's last "
          f"{result.final_window} updates")
    for i, seed in enumerate(result.seeds):
        print(f"  seed {seed}: best member {format_return(result.population_best[i])}, "
              f"population mean {format_return(result.population_mean[i])}")
    values = ", ".join(f"{k}={best[k]:g}" for k in result.space.names)
    print(f"  best: member {best['member']} of seed {best['seed']}: {values} (final return "
          f"{format_return(best['final_return'])}); train it with: jaxrl-async train "
          f"--config {out / 'best.json'}")
    print(f"  members: {out / 'members.csv'}, lineage: {out / 'lineage.json'}, plot: "
          f"{out / 'population.png'}; resume with --resume {out}")


def tracked(result: Any) -> dict[str, Any]:
    """The population's settings as the tracker run's config shows them."""
    return {"space": result.space.to_json(), "schedule": dataclasses.asdict(result.schedule),
            "seeds": list(result.seeds)}

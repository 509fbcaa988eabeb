"""``jaxrl-async tune``: Optuna's samplers over batches of vmapped trials (``jra.optuna_search``).

The tune directory holds ``base.json`` (the base config, a run file), ``tune.json`` (the
search's settings: ``--resume DIR`` runs the same search again, which goes on to the same number
of trials), the study (``study.db``, Optuna's SQLite storage, unless ``--storage`` names
another), ``trials.csv`` (the trials this call trained), ``best.json`` (a run file of the
study's best trial: ``jaxrl-async train --config DIR/best.json``), ``tune.png`` and, with
``--test-seeds``, ``test.json`` (the best config re-trained on held-out seeds)."""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

from jaxrl_async.cli import options
from jaxrl_async.cli.parsers import _config_parser

PRUNERS = ("none", "median", "halving", "hyperband")


def tune_parser(algo: str) -> argparse.ArgumentParser:
    parser = _config_parser(
        "jaxrl-async tune",
        f"Tune {algo.upper()} with Optuna, a batch of trials at a time trained as one vmapped "
        "program; the other flags set the base config.", algo)
    parser.add_argument("--space", action="append", default=[],
                        metavar="FIELD=log:LO:HI|uniform:LO:HI|V1,V2,...",
                        help="a field's range (log or linear) or choices, static fields too "
                             "(hidden_sizes=64x64,32x32) (repeat)")
    parser.add_argument("--trials", type=int, default=None,
                        help="finished trials the study should hold (default: 64; with "
                             "--resume: raises the directory's total)")
    parser.add_argument("--batch", type=int, default=16,
                        help="trials asked and trained together (default: 16)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per trial (default: 1)")
    parser.add_argument("--sampler", default="tpe", choices=("tpe", "cmaes", "random", "qmc"),
                        help="Optuna's sampler (default: tpe)")
    parser.add_argument("--pruner", default="none", choices=PRUNERS,
                        help="Optuna's pruner, asked after every --report-every updates "
                             "(default: none)")
    parser.add_argument("--report-every", type=int, default=None, metavar="N",
                        help="updates between reports to the pruner (default: a tenth)")
    parser.add_argument("--sample-seed", type=int, default=0,
                        help="the sampler's seed (default: 0)")
    parser.add_argument("--storage", default=None,
                        help="Optuna storage: sqlite:///PATH, any SQLAlchemy URL, or "
                             "journal:PATH; several processes may share it (default: "
                             "sqlite:///OUT/study.db)")
    parser.add_argument("--study-name", default=None,
                        help="the study's name in the storage (default: the directory's name)")
    parser.add_argument("--test-seeds", type=int, default=None, metavar="N",
                        help="re-train the best config on N seeds after the tuning seeds")
    parser.add_argument("--resume", default=None, metavar="DIR",
                        help="run DIR's search again (its own settings): it goes on to the "
                             "same number of trials")
    parser.add_argument("--out", default=None,
                        help="output directory (default: runs/tune_<algo>_<env>_<time>)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show a progress bar (default: on)")
    options.add_compile_cache_option(parser)
    return parser


def space_of(cfg: Any, items: list[str]) -> dict[str, Any]:
    """The ``--space`` items, each checked against ``cfg`` as Optuna's distributions (static
    fields too); errors name the item."""
    from jaxrl_async.cli.sweep import parse_space
    from jaxrl_async.search.optuna_study import distributions

    return parse_space(cfg, items, distributions)


def pruner_of(name: str) -> Any:
    if name == "none":
        return None
    import optuna

    return {"median": optuna.pruners.MedianPruner,
            "halving": optuna.pruners.SuccessiveHalvingPruner,
            "hyperband": optuna.pruners.HyperbandPruner}[name]()


def settings(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """What ``tune.json`` keeps: the flags of the search (the base config is ``base.json``)."""
    storage = args.storage or f"sqlite:///{(out / 'study.db').resolve()}"
    return {"space": list(args.space), "trials": args.trials or 64, "batch": args.batch,
            "seeds": args.seeds, "sampler": args.sampler, "pruner": args.pruner,
            "report_every": args.report_every, "sample_seed": args.sample_seed,
            "storage": storage, "study_name": args.study_name or out.name,
            "test_seeds": args.test_seeds}


def run(args: argparse.Namespace) -> tuple[Any, dict, dict, Path]:
    """The search the flags (or ``--resume DIR``'s ``tune.json``) describe; every check before
    anything compiles, and before anything is written."""
    import jaxrl_async as jra
    from jaxrl_async.cli.args import config_from_args
    from jaxrl_async.config.shared import to_dict
    from jaxrl_async.run import sinks

    if args.resume:
        try:
            kept = json.loads((Path(args.resume) / "tune.json").read_text())
        except FileNotFoundError:
            raise ValueError(f"--resume {args.resume}: not a tune directory (no tune.json)"
                             ) from None
        cfg = jra.load_config(Path(args.resume) / "base.json")
        out = Path(args.out or args.resume)
        kept["trials"] = args.trials or kept["trials"]
    else:
        cfg = config_from_args(args)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(args.out or f"runs/tune_{cfg.name}_{cfg.env}_{stamp}")
        kept = settings(args, out)
    spec = space_of(cfg, kept["space"])
    out.mkdir(parents=True, exist_ok=True)
    sinks.write_json(out / "base.json", to_dict(cfg))
    sinks.write_json(out / "tune.json", kept)
    result = jra.optuna_search(
        cfg, spec, kept["trials"], kept["batch"], kept["seeds"], storage=kept["storage"],
        study_name=kept["study_name"], sampler=kept["sampler"],
        pruner=pruner_of(kept["pruner"]), report_every=kept["report_every"],
        seed=kept["sample_seed"], test_seeds=kept["test_seeds"], progress=args.progress)
    return result, kept, spec, out


def write(out: Path, result: Any, kept: dict, spec: dict) -> dict | None:
    """The directory's result files; returns the study's best trial (of any process) as a
    row, or None when no trial has a score."""
    from jaxrl_async.config.shared import to_dict
    from jaxrl_async.run import sinks
    from jaxrl_async.search.optuna_study import finished

    result.to_csv(out / "trials.csv")
    result.plot(path=out / "tune.png")
    if result.test is not None:
        sinks.write_json(out / "test.json", result.test)
    study = result.study
    if not any(t.value is not None for t in study.trials):
        return None
    best = result.best()  # the study's, of every call and process
    point = {k: best[k] for k in spec}
    sinks.write_json(out / "best.json", {**to_dict(best["cfg"]), "from_tune": {
        "dir": str(out), "trial": best["trial"], "value": best["final_return"],
        "study": kept["study_name"], "storage": kept["storage"],
        "finished_trials": finished(study)}})
    return {"trial": best["trial"], "value": best["final_return"], **point}


def report(out: Path, result: Any, best: dict | None, kept: dict) -> None:
    from jaxrl_async.run.sinks import format_return
    from jaxrl_async.search.held_out import describe

    t = result.timing
    states = {s: result.states.count(s) for s in dict.fromkeys(result.states)}
    print(f"\ntune: {len(result.points)} trials x {len(result.seeds)} seeds trained here in "
          f"{t['batches']} batches ({', '.join(f'{n} {s.lower()}' for s, n in states.items())})"
          f", train {t['train_s']:.1f} s, {t['sps']:,.0f} SPS in all; the study holds "
          f"{len(result.study.trials)} trials")
    if best is None:
        print("  no trial has a score yet (no episode ended in any)")
    else:
        values = ", ".join(f"{k}={v}" for k, v in best.items() if k not in ("trial", "value"))
        print(f"  best: trial {best['trial']}: {values} (final return "
              f"{format_return(best['value'])}); train it with: jaxrl-async train --config "
              f"{out / 'best.json'}")
    if result.test is not None:
        print(f"  held out: {describe(result.test)}")
    print(f"  trials: {out / 'trials.csv'}, plot: {out / 'tune.png'}; the study: "
          f"optuna-dashboard {kept['storage']}; go on with --resume {out}")

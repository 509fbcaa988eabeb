"""The parts of ``jaxrl-async sweep`` (``cli.cmd_sweep``): the swept spaces from the flags, the
sweep directory (its ``config.json`` reruns the sweep with ``sweep --config``, its ``best.json``
trains the best config with ``train --config``) and the printed table."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxrl_async.cli.parsers import _number


def spaces(cfg: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The swept fields' values (``--grid``) or ranges (``--random``), checked against
    ``cfg``; errors name the ``--grid``/``--random`` item they come from."""
    from jaxrl_async.search.sweep import check_fields, check_sweepable

    if bool(args.grid) == bool(args.random):
        raise ValueError("give either --grid FIELD=V1,V2 ... or --random FIELD=log:LO:HI ...")
    spec: dict[str, Any] = {}
    for item in args.grid + args.random:
        flag = f"--{'grid' if args.grid else 'random'} {item}"
        name, _, text = item.partition("=")
        try:  # a grid may hold static fields (a program per value); a random range may not
            (check_fields if args.grid else check_sweepable)(cfg, [name])
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from None
        if name in spec:
            raise ValueError(f"{flag}: {name} is given twice")
        spec[name] = _parse_values(cfg, name, text, flag) if args.grid else _parse_range(item)
        for value in spec[name] if args.grid else ():  # each value passes the field's check
            try:
                dataclasses.replace(cfg, **{name: value})
            except ValueError as e:
                raise ValueError(f"{flag}: {e}") from None
    return spec


def parse_space(cfg: Any, items: list[str], check: Callable[[Any, dict], Any]) -> dict[str, Any]:
    """The ``--space FIELD=log:LO:HI|uniform:LO:HI|V1,V2,...`` items of ``pbt``, ``halving``
    and ``tune`` as ranges and lists, each passed through ``check(cfg, {field: spec})`` (the
    search's own validation: ``Space.of``, Optuna's ``distributions``); errors name the item."""
    if not items:
        raise ValueError("give the search space: --space FIELD=log:LO:HI, "
                         "--space FIELD=uniform:LO:HI or --space FIELD=V1,V2,... (repeat)")
    spec: dict[str, Any] = {}
    for item in items:
        flag = f"--space {item}"
        name, _, text = item.partition("=")
        if name in spec:
            raise ValueError(f"{flag}: {name} is given twice")
        try:
            if text.split(":")[0] in ("log", "loguniform", "uniform"):
                spec[name] = _parse_range(item)
            else:
                if not hasattr(cfg, name):
                    check(cfg, {name: [0]})  # names the field and the allowed ones
                spec[name] = _parse_values(cfg, name, text, flag)
            check(cfg, {name: spec[name]})
        except ValueError as e:
            reason = str(e).removeprefix("--random ").removeprefix(f"{flag}: ")
            raise ValueError(f"{flag}: {reason}") from None
    return spec


def _parse_values(cfg: Any, name: str, text: str, flag: str) -> list[Any]:
    """``V1,V2,...``; a tuple field's values as ``64x64,128x128`` (``hidden_sizes``)."""
    kind = type(getattr(cfg, name))
    try:
        if kind is tuple:
            return [tuple(_number(int)(x) for x in v.split("x")) for v in text.split(",") if v]
        return [_number(kind)(v) for v in text.split(",") if v]
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise ValueError(f"{flag}: {e}") from None


def _parse_range(text: str) -> Any:
    from jaxrl_async.search.sweep import LogUniform, Uniform

    parts = text.partition("=")[2].split(":")
    kinds = {"log": LogUniform, "loguniform": LogUniform, "uniform": Uniform}
    if len(parts) != 3 or parts[0] not in kinds:
        raise ValueError(f"--random {text}: expected FIELD=log:LO:HI or FIELD=uniform:LO:HI")
    return kinds[parts[0]](float(parts[1]), float(parts[2]))


def _range_text(space: Any) -> str:
    """A random-search range as a sweep file writes it: ``log:LO:HI`` or ``uniform:LO:HI``."""
    from jaxrl_async.search.sweep import LogUniform

    kind = "log" if isinstance(space, LogUniform) else "uniform"
    return f"{kind}:{space.low!r}:{space.high!r}"


def prepare(argv: list[str]) -> list[str]:
    """Before JAX starts its backend: join a multi-process sweep (``--distributed`` and the
    rest) and, for ``--resume DIR``, read the sweep from ``DIR/config.json`` (added as
    ``--config``, unless one is given)."""
    from jaxrl_async.cli.args import join_distributed, wants_distributed

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in ("--resume", "--coordinator-address", "--num-processes", "--process-id"):
        pre.add_argument(flag, default=None)
    pre.add_argument("--distributed", action="store_true")
    known, _ = pre.parse_known_args(argv)
    if wants_distributed(known):
        for name in ("num_processes", "process_id"):
            value = getattr(known, name)
            setattr(known, name, None if value is None else _number(int)(value))
        join_distributed(known)
    if known.resume is None:
        return argv
    path = Path(known.resume) / "config.json"
    if not path.exists():
        raise ValueError(f"--resume {known.resume}: no sweep to continue there (no {path})")
    return argv if "--config" in argv else [*argv, "--config", str(path)]


def checkpointing(args: argparse.Namespace, out: Path) -> int | None:
    """The runs per chunk: ``--runs-per-chunk``, else (``--resume``) the sweep's own."""
    from jaxrl_async.search.sweep_chunks import read_meta

    if args.runs_per_chunk is not None or not args.resume:
        return args.runs_per_chunk
    return (read_meta(out) or {}).get("runs_per_chunk")


def _sweep_file(cfg: Any, spec: dict[str, Any], args: argparse.Namespace,
                num_samples: int, num_seeds: int) -> dict[str, Any]:
    from jaxrl_async.config.shared import to_dict

    sweep_file: dict[str, Any] = {"base": to_dict(cfg)}
    if args.grid:
        sweep_file["grid"] = {k: list(v) for k, v in spec.items()}
    else:
        sweep_file.update(random={k: _range_text(v) for k, v in spec.items()},
                          num_samples=num_samples, sample_seed=args.sample_seed)
    return {**sweep_file, "seeds": num_seeds, "rank_by": args.rank_by}


def start_sweep(out: Path, cfg: Any, spec: dict[str, Any], args: argparse.Namespace) -> None:
    """Process 0 writes ``config.json`` first (``sweep --resume`` reads it), unless ``out``
    holds a sweep's checkpoint already (which the sweep then checks is this one)."""
    from jaxrl_async.run import sinks
    from jaxrl_async.run.distributed import is_main_process
    from jaxrl_async.search.sweep_chunks import META

    if is_main_process() and not (out / META).exists():
        sinks.write_json(out / "config.json",
                         _sweep_file(cfg, spec, args, args.num_samples, args.seeds))


def write_sweep(out: Path, cfg: Any, spec: dict[str, Any], result: Any,
                args: argparse.Namespace, best: dict[str, Any] | None) -> None:
    """Write the sweep directory: ``config.json`` (a sweep file of this sweep), ``results.csv``,
    ``sweep.png`` and, with a ``best`` row (``result.best(args.rank_by)``), ``best.json``: a run
    file of the best config, with where it came from under ``from_sweep``."""
    from jaxrl_async.config.shared import to_dict
    from jaxrl_async.run import sinks

    out.mkdir(parents=True, exist_ok=True)
    sinks.write_json(out / "config.json", _sweep_file(cfg, spec, args, len(result.configs),
                                                      len(result.seeds)))
    result.to_csv(out / "results.csv")
    result.plot(path=out / "sweep.png")
    if best is not None:
        scores = {k: v for k, v in best.items() if k not in ("cfg", "config", *result.fields)}
        sinks.write_json(out / "best.json", {**to_dict(best["cfg"]), "from_sweep": {
            "sweep": str(out), "config": best["config"], "rank_by": args.rank_by,
            "seeds": list(result.seeds), **scores}})


def report(out: Path, cfg: Any, result: Any, rank_by: str, best: dict | str) -> None:
    """Print the table (the best first, by ``rank_by``), the window used and the winner
    (``best``: its row, or why there is none)."""
    import math

    from jaxrl_async.run.sinks import format_return
    from jaxrl_async.search.sweep_result import label

    t, window = result.timing, result.final_window
    groups = t.get("groups", 1)
    compiles = "one compile" if groups == 1 else f"{groups} static groups, a compile each"
    print(f"\n{len(result.configs)} configs x {len(result.seeds)} seeds = {t['runs']} runs on "
          f"{t['devices']} device(s), {compiles}: {t['compile_s']:.1f} s, train "
          f"{t['train_s']:.1f} s, {t['sps']:,.0f} SPS in all")
    print(f"  final return: the mean return of the episodes that ended in each run's last "
          f"{window} updates ({window * cfg.num_steps:,} steps per env); ranked by {rank_by}")

    def cell(name: str, label: str, row: dict) -> str:
        if not math.isfinite(row[name]):
            return f"  {label} none" + (" (no episode ended)" if name != "final_eval_return"
                                        else "")
        return f"  {label} {format_return(row[name])} ± {format_return(row[name + '_std'])}"

    columns = [("final_return", "final return"), ("auc", "auc"),
               ("final_eval_return", "final eval")]
    shown = [c for c in columns if c[0] in ("final_return", rank_by)
             or (c[0] == "final_eval_return" and "eval_return" in result.curves)]
    tables = {name: result.summary(name) for name, _ in shown}
    order = sorted(range(len(result.configs)),
                   key=lambda c: -_finite(tables[rank_by][c][rank_by]))
    for c in order[:10]:
        values = "  ".join(f"{k}={label(result.points[c][k])}" for k in result.fields)
        print(f"  {values}" + "".join(cell(name, label, tables[name][c])
                                      for name, label in shown))
    if isinstance(best, str):
        print(f"  no best config: {best}")
    else:
        values = ", ".join(f"{k}={label(best[k])}" for k in result.fields)
        label = dict(columns)[rank_by]
        print(f"  best: {values} ({label} {format_return(best[rank_by])}); train it with: "
              f"jaxrl-async train --config {out / 'best.json'}")
    print(f"  results: {out / 'results.csv'}, plot: {out / 'sweep.png'}; rerun the sweep with: "
          f"jaxrl-async sweep --config {out / 'config.json'}")


def tracked_spaces(spec: dict[str, Any], result: Any, args: argparse.Namespace) -> dict:
    """The swept spaces as the tracker run's config shows them (``sweep`` key)."""
    return {"grid" if args.grid else "random": {
        k: (list(v) if args.grid else {"kind": type(v).__name__, "low": v.low, "high": v.high})
        for k, v in spec.items()}, "seeds": list(result.seeds), "sample_seed": args.sample_seed}


def _finite(x: float) -> float:
    return x if x == x else float("-inf")

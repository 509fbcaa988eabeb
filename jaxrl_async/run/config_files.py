"""Settings kept in files: a run's config (``train --config run.yaml``, ``jra.load_config``)
and a sweep's (``sweep --config sweep.yaml``), in YAML or JSON.

A run file names the algorithm and sets any of its fields (``runner`` is a name or a mapping)::

    algo: ppo                 # or, as a run directory's config.json writes it: _type: PPOConfig
    env: CartPole-v1
    total_timesteps: 5.0e+5
    lr: 2.5e-4
    runner: {name: async, learner_devices: 2}   # or: runner: sync
    seed: 0                   # optional
    from_sweep: {...}         # optional, not read: a search's best.json says where it came from
                              # (from_sweep, from_population, from_tune)

A sweep file holds the base config (a mapping as above, or the path of a run file, relative to
the sweep file), the grid or the random-search spaces, and the seeds::

    base: cartpole_ppo.yaml
    grid: {lr: [1.0e-4, 3.0e-4], ent_coef: [0.0, 0.01]}    # or
    random: {lr: log:1e-4:1e-2}                             # with num_samples, sample_seed
    seeds: 4
    rank_by: final_return     # optional: or auc, final_eval_return (what picks the best)

A sweep directory's ``config.json`` is a sweep file (its base as a ``config.json`` mapping),
and its ``best.json`` a run file of the best config.

**Presets**: run files that come with the package (``jaxrl_async/presets``: the reference
settings, and under ``published/`` the published settings ``make reproduce`` runs), given by
name wherever a file is: ``train --config pendulum_ppo``, ``jra.load_config("cleanrl_ppo_hopper")``;
``jaxrl-async presets`` lists them.

Every key is checked before anything compiles: an unknown key, a wrong type or a bad value is a
``ValueError`` naming the file, the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from jaxrl_async.algos import REGISTRY
from jaxrl_async.config.fields import check_seed
from jaxrl_async.config.shared import AsyncConfig, SyncConfig
from jaxrl_async.run.sinks import SCORES

SUFFIXES = (".yaml", ".yml", ".json")
RUNNERS = {"sync": SyncConfig, "async": AsyncConfig}
SWEEP_KEYS = ("base", "grid", "random", "num_samples", "seeds", "sample_seed", "rank_by")
RANGE_KINDS = ("log", "uniform")


PRESETS = Path(__file__).resolve().parents[1] / "presets"
"""The package's run files (see the module docstring)."""


class ConfigFileError(ValueError):
    """A config file that cannot be read or does not describe a valid config."""


def presets() -> dict[str, Path]:
    """Every preset: name (the file's stem) -> file."""
    return {p.stem: p for p in sorted(PRESETS.rglob("*")) if p.suffix in SUFFIXES}


def is_preset(name: str | Path) -> bool:
    """Whether ``name`` names a preset and no file or folder here."""
    return not Path(name).exists() and str(name) in presets()


def resolve(path: str | Path) -> Path:
    """A settings file: ``path``, or the preset it names. A name that is neither (no suffix, no
    such file) is a ``ConfigFileError`` listing the presets (the nearest first)."""
    found = presets()
    if is_preset(path):
        return found[str(path)]
    path = Path(path)
    if path.suffix or path.exists() or len(path.parts) > 1:
        return path
    import difflib

    near = difflib.get_close_matches(str(path), found, n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise ConfigFileError(f"{path}: no such file, and no preset of that name{hint}; presets: "
                          f"{', '.join(found)} (jaxrl-async presets describes them)")


def read_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML or JSON file (or the preset of that name) holds (YAML also reads
    ``1e-4`` as a number)."""
    path = resolve(path)
    if path.suffix not in SUFFIXES:
        raise ConfigFileError(f"{path}: a config file ends in one of {list(SUFFIXES)}")
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot be read ({e.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else _yaml(text)
    except ValueError as e:  # json.JSONDecodeError and yaml.YAMLError (re-raised below)
        raise ConfigFileError(f"{path}: not valid {path.suffix[1:].upper()}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: must hold a mapping of keys to values, got "
                              f"{type(data).__name__}")
    return data


def _yaml(text: str) -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    # YAML 1.1 reads 1e-4 (no dot) as a string; read it as the number everybody means.
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
        r"^[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)[eE][-+]?\d+$"), list("-+0123456789."))
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise ValueError(str(e)) from None


def load_config_file(path: str | Path) -> tuple[Any, int | None]:
    """The validated config a run file (or preset) describes, and its ``seed`` (``None`` if
    not given)."""
    data = read_file(path)
    if is_sweep_file(data):
        raise ConfigFileError(sweep_note(path))
    return config_from_mapping(data, str(path))


def is_sweep_file(data: dict[str, Any]) -> bool:
    """Whether ``data`` (a file's mapping) is a sweep's: a sweep file, or the ``config.json``
    an older ``jaxrl-async sweep`` wrote (the base config with a ``sweep`` key)."""
    return "base" in data or ("_type" in data and isinstance(data.get("sweep"), dict))


def sweep_note(path: str | Path) -> str:
    """Why a sweep's directory or file is not a run's, and what to pass instead."""
    path = Path(path)
    folder, sweep_file = (path, path / "config.json") if path.is_dir() else (path.parent, path)
    best = folder / "best.json"
    train = (f"train its best config with `jaxrl-async train --config {best} --run-dir RUN` "
             "(then pass RUN), or " if best.exists() else "")
    what = ("a sweep directory (jaxrl-async sweep's output), not a run directory: it holds no "
            "trained run to evaluate, resume or load" if path.is_dir() else
            "a sweep file (the base config and the swept values), not a run file")
    return (f"{path} is {what}; {train}rerun the sweep with `jaxrl-async sweep --config "
            f"{sweep_file}`")


def config_from_mapping(data: dict[str, Any], where: str) -> tuple[Any, int | None]:
    """A config (and seed) from a run file's mapping; errors start with ``where``."""
    data = dict(data)
    seed = data.pop("seed", None)
    for origin in ("from_sweep", "from_population", "from_tune"):
        data.pop(origin, None)  # a search's best.json: where the config came from
    if seed is not None:
        try:
            seed = check_seed(int(seed) if _is_int(seed) else seed, f"{where}: seed")
        except ValueError as e:
            raise ConfigFileError(str(e)) from None
    cls = _config_class(data, where)
    runner = _runner(data.pop("runner", None), where)
    kwargs = _fields(cls, data, where, skip=("runner",))
    try:
        cfg = cls(runner=runner, **kwargs) if runner is not None else cls(**kwargs)
    except ValueError as e:
        raise ConfigFileError(f"{where}: {e}") from None
    return cfg, seed


def _config_class(data: dict[str, Any], where: str) -> type:
    algo, type_name = data.pop("algo", None), data.pop("_type", None)
    by_type = {cls.__name__: cls for cls, _ in REGISTRY.values()}
    if algo is None and type_name is None:
        raise ConfigFileError(f"{where}: needs the key 'algo', one of {sorted(REGISTRY)}")
    if algo is not None and algo not in REGISTRY:
        raise ConfigFileError(f"{where}: algo must be one of {sorted(REGISTRY)}, got {algo!r}")
    if type_name is not None and type_name not in by_type:
        raise ConfigFileError(f"{where}: _type must be one of {sorted(by_type)}, got "
                              f"{type_name!r}")
    cls = REGISTRY[algo][0] if algo is not None else by_type[type_name]
    if type_name is not None and by_type[type_name] is not cls:
        raise ConfigFileError(f"{where}: algo {algo!r} and _type {type_name!r} disagree")
    return cls


def _runner(value: Any, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise ConfigFileError(f"{where}: runner must be one of {sorted(RUNNERS)} or a mapping "
                              f"with 'name' and runner fields, got {value!r}")
    value = dict(value)
    name, type_name = value.pop("name", None), value.pop("_type", None)
    if type_name is not None:
        by_type = {cls.__name__: key for key, cls in RUNNERS.items()}
        if type_name not in by_type or (name is not None and by_type[type_name] != name):
            raise ConfigFileError(f"{where}: runner._type must be one of {sorted(by_type)}"
                                  + (f" matching name {name!r}" if name else "")
                                  + f", got {type_name!r}")
        name = by_type[type_name]
    if name not in RUNNERS:
        raise ConfigFileError(f"{where}: runner name must be one of {sorted(RUNNERS)}, got "
                              f"{name!r}")
    cls = RUNNERS[name]
    try:
        return cls(**_fields(cls, value, f"{where}: runner"))
    except ValueError as e:
        if isinstance(e, ConfigFileError):
            raise
        raise ConfigFileError(f"{where}: {e}") from None


def _fields(cls: type, data: dict[str, Any], where: str, skip: tuple[str, ...] = ()) -> dict:
    """``data`` checked against ``cls``'s fields: known keys, each of its field's type."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    unknown = sorted(data.keys() - fields.keys())
    if unknown:
        raise ConfigFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for "
                              f"{cls.__name__}; allowed: {', '.join(sorted(fields))}")
    return {name: _typed(cls, fields[name], value, where) for name, value in data.items()}


def _typed(cls: type, field: dataclasses.Field, value: Any, where: str) -> Any:
    """``value`` as the type of ``field``'s default, or an error naming the key."""
    default = field.default
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, kind = _is_int(value), "an integer"
        value = int(value) if ok else value
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        kind, value = "a number", float(value) if ok else value
    elif isinstance(default, tuple):
        ok = isinstance(value, list) and all(_is_int(v) for v in value)
        kind, value = "a list of integers", tuple(int(v) for v in value) if ok else value
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    else:
        ok, kind = True, ""
    if not ok:
        raise ConfigFileError(f"{where}: {field.name} must be {kind} ({cls.__name__}."
                              f"{field.name}), got {value!r}")
    return value


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


# --------------------------------------------------------------------------- sweep files
@dataclasses.dataclass(frozen=True)
class SweepFile:
    """What a sweep file describes: the base config, a grid (``{field: [values]}``) or random
    search spaces (``{field: 'log:LO:HI'}``), and the seeds."""

    cfg: Any
    grid: dict[str, list[Any]]
    random: dict[str, str]
    num_samples: int | None
    seeds: int | None
    sample_seed: int | None
    rank_by: str | None = None


def load_sweep_file(path: str | Path) -> SweepFile:
    """A sweep file's contents, checked (the swept fields' names and values too)."""
    from jaxrl_async.config.shared import hyper_fields

    path = Path(path)
    data, where = read_file(path), str(path)
    unknown = sorted(data.keys() - set(SWEEP_KEYS))
    if unknown:
        raise ConfigFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                              f"allowed: {', '.join(SWEEP_KEYS)}")
    base = data.get("base")
    if isinstance(base, str):
        cfg, _ = load_config_file(path.parent / base)
    elif isinstance(base, dict):
        cfg, _ = config_from_mapping(base, f"{where}: base")
    else:
        raise ConfigFileError(f"{where}: base must be a mapping of config keys or the path of "
                              f"a run file, got {base!r}")
    grid, random = data.get("grid") or {}, data.get("random") or {}
    for key, value in (("grid", grid), ("random", random)):
        if not isinstance(value, dict):
            raise ConfigFileError(f"{where}: {key} must map field names to values, got "
                                  f"{value!r}")
    if bool(grid) == bool(random):
        raise ConfigFileError(f"{where}: give either grid or random (not both, not neither)")
    sweepable = hyper_fields(cfg)
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    for name in {**grid, **random}:
        if name not in sweepable:
            raise ConfigFileError(f"{where}: {name!r} cannot be swept; sweepable fields of "
                                  f"{type(cfg).__name__}: {', '.join(sweepable)}")
    for name, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigFileError(f"{where}: grid.{name} must be a non-empty list, got "
                                  f"{values!r}")
        grid[name] = [_typed(type(cfg), fields[name], v, f"{where}: grid") for v in values]
        for v in grid[name]:  # each value passes the field's own check
            try:
                dataclasses.replace(cfg, **{name: v})
            except ValueError as e:
                raise ConfigFileError(f"{where}: grid.{name}: {e}") from None
    for name, spec in random.items():
        parts = str(spec).split(":")
        if (len(parts) != 3 or parts[0] not in RANGE_KINDS
                or not all(_is_number(p) for p in parts[1:])):
            raise ConfigFileError(f"{where}: random.{name} must be 'log:LO:HI' or "
                                  f"'uniform:LO:HI', got {spec!r}")
    out = {}
    for key, least in (("num_samples", 1), ("seeds", 1), ("sample_seed", 0)):
        value = data.get(key)
        if value is not None and (not _is_int(value) or value < least):
            raise ConfigFileError(f"{where}: {key} must be an integer >= {least}, got "
                                  f"{value!r}")
        out[key] = None if value is None else int(value)
    if out["num_samples"] is not None and not random:
        raise ConfigFileError(f"{where}: num_samples applies to random search only")
    rank_by = data.get("rank_by")
    if rank_by is not None and rank_by not in SCORES:
        raise ConfigFileError(f"{where}: rank_by must be one of {', '.join(SCORES)}, got "
                              f"{rank_by!r}")
    return SweepFile(cfg=cfg, grid=grid, random={k: str(v) for k, v in random.items()},
                     rank_by=rank_by, **out)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


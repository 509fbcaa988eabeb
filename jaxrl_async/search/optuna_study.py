"""The Optuna side of ``jra.optuna_search``: the space as Optuna's distributions, the study in
Optuna's own storage (memory, an RDB URL, a journal file), and the heartbeat of running trials.
Optuna is an optional extra (``pip install "jaxrl_async[optuna]"``), imported when used."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxrl_async.config.shared import hyper_fields, static_fields
from jaxrl_async.search.sweep import LogUniform, Uniform

SAMPLERS = ("tpe", "cmaes", "random", "qmc")


def require_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ImportError('jra.optuna_search needs Optuna: pip install "jaxrl_async[optuna]" '
                          '(or pip install optuna)') from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial otherwise
    return optuna


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Without Optuna's notes that its heartbeat is "experimental" and "supposed to be used with
    Study.optimize": here the heartbeat thread is ours (``Heartbeat``), as optimize's is."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed", UserWarning)
        yield


# --------------------------------------------------------------------------- the space
def distributions(cfg: Any, space: Mapping[str, Any]) -> tuple[dict, dict]:
    """``space`` (field -> ``jra.LogUniform``/``jra.Uniform``/a list of choices, or an Optuna
    distribution) as Optuna distributions, and for each field the decoding of a sampled value
    (a static field's choices are sampled by their index: tuples are no Optuna choices).
    ``ValueError`` naming a field the config lacks or a bound outside the field's range."""
    require_optuna()
    from optuna.distributions import (
        BaseDistribution,
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if not isinstance(space, Mapping) or not space:
        raise ValueError(f"space must be a non-empty dict of field -> jra.LogUniform(lo, hi), "
                         f"jra.Uniform(lo, hi), a list of choices or an Optuna distribution, "
                         f"got {space!r}")
    known = (*hyper_fields(cfg), *static_fields(cfg))
    dists, decode = {}, {}
    for name, spec in space.items():
        if name not in known:
            raise ValueError(f"{type(cfg).__name__} has no field {name!r}; fields: "
                             f"{', '.join(known)}")
        integer = isinstance(getattr(cfg, name), (int, np.integer)) and not isinstance(
            getattr(cfg, name), bool)
        if isinstance(spec, (Uniform, LogUniform)):
            log = isinstance(spec, LogUniform)
            if not spec.low < spec.high or (log and spec.low <= 0):
                raise ValueError(f"space[{name!r}] needs {'0 < ' if log else ''}low < high, "
                                 f"got {spec}")
            kind = IntDistribution if integer else FloatDistribution
            dist = kind(int(spec.low) if integer else spec.low,
                        int(spec.high) if integer else spec.high, log=log)
            ends, decode[name] = [dist.low, dist.high], None
        elif isinstance(spec, BaseDistribution):
            dist = spec
            ends = (list(spec.choices) if isinstance(spec, CategoricalDistribution)
                    else [spec.low, spec.high])
            decode[name] = None
        elif isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)) and spec:
            dist, ends = CategoricalDistribution(list(range(len(spec)))), list(spec)
            decode[name] = list(spec)
        else:
            raise ValueError(f"space[{name!r}] must be jra.LogUniform(lo, hi), "
                             f"jra.Uniform(lo, hi), a non-empty list of choices or an Optuna "
                             f"distribution, got {spec!r}")
        for value in ends:  # the field's own check, before anything compiles
            try:
                dataclasses.replace(cfg, **{name: value})
            except (ValueError, TypeError) as e:
                raise ValueError(f"space[{name!r}]: {value!r} is outside "
                                 f"{type(cfg).__name__}.{name}'s valid range: {e}") from None
        dists[name] = dist
    return dists, decode


def point_of(trial: Any, decode: dict) -> dict[str, Any]:
    """The config fields of an asked trial."""
    return {k: (v if decode.get(k) is None else decode[k][v]) for k, v in trial.params.items()}


# --------------------------------------------------------------------------- the study
def make_sampler(name: str | Any, seed: int) -> Any:
    optuna = require_optuna()
    if not isinstance(name, str):
        return name  # an Optuna sampler object
    if name == "tpe":  # the running trials of a batch are "lied" about, so they spread out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)} or an Optuna sampler, "
                     f"got {name!r}")


def open_study(storage: str | None, study_name: str | None, sampler: Any, pruner: Any,
               heartbeat_s: int, grace_s: int) -> Any:
    """Optuna's study in ``storage`` (created, or loaded when it exists): maximising, with
    ``sampler`` (``make_sampler``'s)."""
    optuna = require_optuna()
    if isinstance(storage, str) and storage.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        storage = JournalStorage(JournalFileBackend(storage.removeprefix("journal:")))
    elif isinstance(storage, str):
        with quiet():
            storage = optuna.storages.RDBStorage(
                storage, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                    3))
    return optuna.create_study(storage=storage, study_name=study_name,
                               sampler=sampler,
                               pruner=pruner or optuna.pruners.NopPruner(),  # not Optuna's median
                               direction="maximize", load_if_exists=study_name is not None)


def finished(study: Any) -> int:
    """The study's finished trials: complete, pruned, or trained to the end without an episode
    ending (failed with ``no_episode``; a killed worker's failed trial is asked again)."""
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(t.state != TrialState.FAIL or t.user_attrs.get("no_episode", False)
               for t in study.get_trials(deepcopy=False, states=done))


def fail_stale(study: Any, grace_s: float) -> None:
    """Fail the trials of killed workers so they are asked again: Optuna's own check (a
    heartbeat older than the grace period: failed and re-queued with the same values), and a
    trial killed between ``study.ask`` and its first heartbeat (no ``worker`` attribute, which
    is set right after it), older than the grace period: failed, its values queued again."""
    import datetime

    import optuna
    from optuna.trial import TrialState

    with quiet():
        optuna.storages.fail_stale_trials(study)
    if Heartbeat.of(study) is None:
        return  # no heartbeats kept (memory, journal): nothing can be told stale
    old = datetime.datetime.now() - datetime.timedelta(seconds=grace_s)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if "worker" not in trial.user_attrs and trial.datetime_start is not None and \
                trial.datetime_start < old:
            try:
                study.tell(trial.number, state=TrialState.FAIL)
            except (ValueError, RuntimeError):  # another worker told it first
                continue
            if trial.params:
                study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})


class Heartbeat:
    """Records Optuna's heartbeat of the running trials every ``interval`` seconds, in a thread
    (what ``study.optimize`` does for its one trial), where the storage keeps heartbeats."""

    def __init__(self, study: Any, interval: float):
        self.storage = Heartbeat.of(study)
        self.interval, self.ids, self.stop = interval, [], threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        if self.storage is not None:
            self.thread.start()

    @staticmethod
    def of(study: Any) -> Any:
        """The study's storage where it keeps heartbeats (RDB with an interval), else None."""
        from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

        storage = study._storage  # Optuna's own study.optimize reads it so
        return storage if isinstance(storage, BaseHeartbeat) and \
            is_heartbeat_enabled(storage) else None

    def watch(self, trials: Sequence[Any]) -> None:
        self.ids = [t._trial_id for t in trials]
        if trials:
            self._record([self.ids[-1]])

    def _record(self, ids: Sequence[int] | None = None) -> None:
        for trial_id in list(self.ids if ids is None else ids) if self.storage else ():
            self.storage.record_heartbeat(trial_id)

    def _beat(self) -> None:
        while not self.stop.wait(self.interval):
            self._record()

    def close(self) -> None:
        self.stop.set()

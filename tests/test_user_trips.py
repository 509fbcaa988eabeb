"""What a new user trips on (issue 22): every resume failure is a ``CheckpointError``; ``eval
--gif`` without the render extra fails first and writes nothing, and ``eval`` keeps training's
evaluation; a NaN final return is explained and a sweep where no episode ended names no winner;
a budget that is not a whole number of updates warns; a finished run can be trained for longer
where nothing depends on its budget; the README states that sweeps refuse async configs.

Round two (issue 32): a sweep scores runs by a window that can hold an episode and ranks by the
final evaluation on request; a sweep's directory round-trips; a smaller budget is refused for
the one reason that applies; one final evaluation everywhere; strict JSON; WANDB_DIR; and the
small wrongs (SDL noise, the progress bar's best, titles, -0.0, grid errors, metric names,
one seed rule)."""

import contextlib
import dataclasses
import importlib
import io
import json
import math
import re
import sys
import types
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.algos import REGISTRY
from jaxrl_async.cli.command import main
from jaxrl_async.run import checkpoint, config_files
from jaxrl_async.runners import sync

REPO = Path(__file__).resolve().parents[1]
# 2 envs x 2 steps, 2 updates: 4 steps per env, far too few for a CartPole episode to end
TINY = ["--algo", "ppo", "--env", "CartPole-v1", "--num-envs", "2", "--num-steps", "2",
        "--total-timesteps", "8", "--num-minibatches", "1", "--update-epochs", "1",
        "--hidden-sizes", "8", "--no-progress"]


def tiny_ppo(**kw):
    base = dict(env="CartPole-v1", num_envs=2, num_steps=2, total_timesteps=8,
                num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
    return jra.PPOConfig(**{**base, **kw})


def files(root):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(Path(root).rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trips") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # evaluated in training after updates 1 and 2
        code = main(["train", *TINY, "--eval-every", "1", "--eval-episodes", "2", "--run-dir",
                     str(run_dir)])
    assert code == 0
    return run_dir, printed.getvalue()


# --------------------------------------------------------------------------- NaN returns
def test_train_explains_a_nan_final_return(cli_run):
    line = next(x for x in cli_run[1].splitlines() if "final return" in x)
    assert "nan" not in line
    assert ("none: no episode ended in the run (each env took 4 steps); a CartPole-v1 episode "
            "ends by its time limit of 500 steps, or earlier: train for longer") in line


def test_sweep_where_no_episode_ended_names_no_winner(tmp_path, monkeypatch, capsys):
    cfg = tiny_ppo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = jra.sweep(cfg, {"lr": [1e-4, 1e-3]}, seeds=1, progress=False)
        rows = result.summary()
    assert np.isnan(result.final_return).all() and all(np.isnan(r["final_return"]) for r in rows)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    with pytest.raises(ValueError, match="no config has a final_return, so none is best: no "
                       "episode ended in the run .*time limit of 500 steps"):
        result.best()

    sweep_module = importlib.import_module("jaxrl_async.search.sweep")  # jra.sweep is the function
    monkeypatch.setattr(sweep_module, "sweep", lambda *a, **k: result)  # the same sweep again
    out = tmp_path / "sweep"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["sweep", *TINY, "--grid", "lr=1e-4,1e-3", "--seeds", "1",
                     "--out", str(out)]) == 0
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    text = capsys.readouterr().out
    assert "nan" not in text and "best:" not in text
    assert text.count("final return none (no episode ended)") == 2
    assert "no best config: no episode ended in the run (each env took 4 steps); a CartPole-v1 " \
           "episode ends by its time limit of 500 steps" in text
    assert (out / "results.csv").exists() and not (out / "best.json").exists()


# --------------------------------------------------------------------------- resume failures
def test_every_resume_failure_is_a_checkpoint_error(cli_run, tmp_path, capsys):
    run = cli_run[0]
    saved = jra.load_config(run)
    (tmp_path / "a_file").write_text("x")
    for name, text in (("bad_json", "{"), ("bad_type", '{"_type": "NoConfig"}'),
                       ("no_checkpoint", (run / "config.json").read_text())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
    cases = [
        (dict(resume=tmp_path / "missing"), "not a run directory: it has no config.json"),
        (dict(resume=tmp_path / "a_file"), "not a run directory"),
        (dict(resume=tmp_path / "bad_json"), "is not valid JSON"),
        (dict(resume=tmp_path / "bad_type"), "does not hold a valid config: unknown config type"),
        (dict(resume=tmp_path / "no_checkpoint"), "no checkpoint in"),
        (dict(resume=run, cfg=dataclasses.replace(saved, lr=1e-3)),
         r"different config: lr: 0.00025 -> 0.001"),
        (dict(resume=run, run_dir=tmp_path / "elsewhere"), "writes to its own directory"),
        (dict(resume=run, cfg=dataclasses.replace(saved, total_timesteps=16)),
         r"total_timesteps 8 -> 16: the run planned a schedule over its budget \(anneal_lr=True"
         r".*Pass extend=True \(jaxrl-async train --extend\)"),
        (dict(resume=run, cfg=dataclasses.replace(saved, total_timesteps=4), extend=True),
         "has trained 2 updates = 8 steps: total_timesteps=4 must be at least that"),
    ]
    before = files(tmp_path.parent)
    for kwargs, message in cases:
        try:
            jra.train(progress=False, **kwargs)
        except jra.CheckpointError as e:
            assert re.search(message, str(e)), (kwargs, str(e))
        else:
            raise AssertionError(f"no CheckpointError for {kwargs}")
        assert files(tmp_path.parent) == before, kwargs  # nothing written, nothing changed
    assert main(["train", "--resume", str(run), "--total-timesteps", "16", "--no-progress"]) == 2
    assert "jaxrl-async train --extend" in capsys.readouterr().err
    assert main(["train", *TINY, "--extend"]) == 2
    assert "--extend continues a run: it needs --resume" in capsys.readouterr().err
    # --extend lets the budget change through: what stops this one is the shorter budget
    assert main(["train", "--resume", str(run), "--total-timesteps", "4", "--extend"]) == 2
    assert "has trained 2 updates" in capsys.readouterr().err
    assert files(tmp_path.parent) == before
    longer = dataclasses.replace(saved, total_timesteps=16)
    checkpoint.check_resume(run, saved, longer, extend=True)  # allowed, re-planned
    unplanned = dataclasses.replace(saved, anneal_lr=False)
    checkpoint.check_resume(run, unplanned, dataclasses.replace(unplanned, total_timesteps=16))


# --------------------------------------------------------------------------- a longer run
def test_a_run_trains_for_longer_where_nothing_depends_on_its_budget(tmp_path):
    cfg = tiny_ppo(anneal_lr=False, log_every=2, normalize_obs=True)  # no schedule over the budget
    longer = dataclasses.replace(cfg, total_timesteps=4 * 4 + 3)  # 4 updates and a remainder
    jra.train(cfg, seed=3, run_dir=tmp_path / "cut", progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        extended = jra.train(longer, resume=tmp_path / "cut", progress=False)
        whole = jra.train(longer, seed=3, progress=False)
    budget = [str(w.message) for w in caught if "whole number of updates" in str(w.message)]
    assert budget == [  # once per run, naming what is trained
        "PPOConfig.total_timesteps=19 is not a whole number of updates of num_envs * "
        "num_steps = 4 steps: training 4 updates = 16 steps (whole budgets nearby: 16 or 20)"
    ] * 2
    # trained for longer = trained with the longer budget from the start, bit for bit
    assert int(extended.state.update) == int(whole.state.update) == 4
    for a, b in zip(jax.tree.leaves(extended.params), jax.tree.leaves(whole.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert extended.metrics.keys() == whole.metrics.keys()
    for k in whole.metrics:
        np.testing.assert_array_equal(extended.metrics[k], whole.metrics[k], err_msg=k)
    assert len((tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()) == 4
    assert checkpoint.steps(tmp_path / "cut")[-1] == 4
    assert jra.load_config(tmp_path / "cut").total_timesteps == 19


def small(name, **kw):
    cls = REGISTRY[name][0]
    fields = {f.name for f in dataclasses.fields(cls)}
    base = dict(num_envs=2, num_steps=4, total_timesteps=8 * 10, hidden_sizes=(8,))
    base.update({k: v for k, v in dict(num_minibatches=1, update_epochs=1, buffer_size=64,
                                       learning_starts=8, batch_size=8, bptt_length=4,
                                       memory_size=8, anneal_lr=False).items() if k in fields})
    return cls(**{**base, **kw})


@pytest.mark.parametrize("cfg", [small(n) for n in REGISTRY] + [small("ppo", anneal_lr=True)],
                         ids=[*REGISTRY, "ppo-anneal"])
def test_declared_budget_schedules_are_what_the_update_depends_on(cfg):
    """The update program (rollout and learning) for one budget and for another is the same
    program exactly when the config declares no schedule over its budget."""

    def update(c):
        prog = sync.program(c)
        return str(jax.make_jaxpr(prog.update)(jax.eval_shape(prog.init, jax.random.key(0))))

    same = update(cfg) == update(dataclasses.replace(cfg, total_timesteps=8 * 20))
    assert same == (cfg.budget_schedules() == []), cfg.budget_schedules()


# --------------------------------------------------------------------------- budgets
def test_a_budget_of_part_of_an_update_warns_naming_what_is_trained():
    with pytest.warns(UserWarning, match=r"PPOConfig.total_timesteps=100 is not a whole number "
                      r"of updates of num_envs \* num_steps = 64 steps: training 1 update = 64 "
                      r"steps \(whole budgets nearby: 64 or 128\)"):
        jra.make_train(jra.PPOConfig(num_envs=4, num_steps=16, total_timesteps=100))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # whole budgets, the defaults among them: no warning
        jra.make_train(jra.PPOConfig(num_envs=4, num_steps=16, total_timesteps=128))
        for cls, _ in REGISTRY.values():
            jra.make_train(cls())
    assert not [w for w in caught if "whole number of updates" in str(w.message)]


# --------------------------------------------------------------------------- eval
def test_eval_gif_without_the_render_extra_fails_first_and_writes_nothing(
        cli_run, tmp_path, monkeypatch, capsys):
    evaluate = importlib.import_module("jaxrl_async.run.evaluate")
    run = cli_run[0]
    monkeypatch.setitem(sys.modules, "pygame", None)  # as without the render extra

    def evaluated(*args, **kwargs):
        raise AssertionError("evaluated before the renderer was checked")

    monkeypatch.setattr(evaluate, "evaluate", evaluated)
    before = files(run)
    assert main(["eval", str(run), "--gif", str(tmp_path / "ep.gif")]) == 2
    err = capsys.readouterr().err
    assert err == ("error: a GIF of CartPole-v1 needs pygame, which is not installed: "
                   'pip install -e ".[render]" (the render extra)\n')
    assert files(run) == before and not (tmp_path / "ep.gif").exists()
    with pytest.raises(ValueError, match="gymnax cannot draw MemoryChain-bsuite; GIFs work for"):
        evaluate.check_renderer("MemoryChain-bsuite")


def test_eval_appends_its_own_file_and_keeps_the_training_evaluation(cli_run, capsys):
    run = cli_run[0]
    trained = (run / "eval.json").read_text()
    for seed in (1, 2):
        assert main(["eval", str(run), "--episodes", "2", "--seed", str(seed)]) == 0
    capsys.readouterr()
    assert (run / "eval.json").read_text() == trained
    records = [json.loads(x) for x in (run / "evals.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["update"], r["num_episodes"]) for r in records] == [(1, 2, 2),
                                                                             (2, 2, 2)]


# --------------------------------------------------------------------------- README
def test_readme_and_sweeps_doc_say_sweeps_refuse_async_configs():
    with pytest.raises(ValueError, match=r"runner: a sweep spreads whole runs over the devices, "
                       r"one device per run; use runner=SyncConfig\(num_devices=1\)"):
        jra.sweep(tiny_ppo(runner=jra.AsyncConfig()), {"lr": [1e-3]})
    for doc in ("README.md", "docs/sweeps.md"):
        text = " ".join((REPO / doc).read_text().split())
        assert "`jra.sweep` refuses async configs" in text, doc


# =========================================================================== round two (issue 32)
def strict_json(text):
    """``json.loads`` that refuses the bare NaN/Infinity no strict parser (jq, JavaScript)
    reads."""
    def refuse(constant):
        raise AssertionError(f"bare {constant} in JSON")

    return json.loads(text, parse_constant=refuse)


# A SAC sweep on Pendulum as its runs report it, without training: 64 updates of 4 envs x 8
# steps; every Pendulum episode lasts its time limit (200 steps = 25 updates), so each env ends
# one in updates 25 and 50 and none in the last 14 updates.
SAC_FLAGS = ["--algo", "sac", "--env", "Pendulum-v1", "--total-timesteps", "2048",
             "--eval-every", "32", "--grid", "lr=3e-4,1e-3,3e-3", "--seeds", "1",
             "--no-progress"]
FINALS = [-1225.0, -1213.0, -0.04]  # per config: every episode's return; -0.04 shows as 0.0
EVALS = [-100.0, -1700.0, -900.0]  # the evaluation after update 64 (and 32)


def pendulum_sweep():
    cfg = jra.SACConfig(env="Pendulum-v1", total_timesteps=2048, eval_every=32)
    lrs = [3e-4, 1e-3, 3e-3]
    updates = cfg.num_updates
    episodes = np.zeros((3, 1, updates), np.float32)
    episodes[..., [24, 49]] = 4  # updates 25 and 50: one episode per env
    sums = episodes * np.asarray(FINALS, np.float32)[:, None, None]
    with np.errstate(invalid="ignore"):
        means = np.where(episodes > 0, sums / episodes, np.nan)
    evals = np.full((3, 1, updates), np.nan, np.float32)
    evals[..., [31, 63]] = np.asarray(EVALS, np.float32)[:, None, None]
    steps = np.broadcast_to(np.arange(1, updates + 1) * 32.0, (3, 1, updates))
    curves = {"episode_return": means, "episode_return_sum": sums, "episodes": episodes,
              "eval_return": evals, "env_steps": steps}
    timing = {"compile_s": 1.0, "train_s": 1.0, "sps": 1.0, "sps_per_run": 1.0, "runs": 3,
              "devices": 1, "padded_runs": 0}
    return jra.SweepResult(base=cfg, fields=("lr",), points=[{"lr": v} for v in lrs],
                           configs=[dataclasses.replace(cfg, lr=v) for v in lrs], seeds=(0,),
                           curves=curves, params=None, timing=timing, grid={"lr": lrs})


@pytest.fixture
def fake_sweep(monkeypatch):
    """``jaxrl_async.search.sweep.sweep`` replaced by one returning ``pendulum_sweep()``; the
    calls it got are recorded."""
    calls, result = [], pendulum_sweep()

    def swept(cfg, grid, seeds, **kwargs):
        calls.append((cfg, grid, seeds))
        return result

    monkeypatch.setattr(importlib.import_module("jaxrl_async.search.sweep"), "sweep", swept)
    return calls, result


def test_a_sweep_scores_runs_by_a_window_that_can_hold_an_episode(fake_sweep, tmp_path, capsys):
    _, result = fake_sweep
    episodes, sums = result.curves["episodes"][..., -25:], result.curves["episode_return_sum"]
    np.testing.assert_allclose(result.final_return, sums[..., -25:].sum(-1) / episodes.sum(-1))
    assert result.best()["lr"] == 3e-3 and result.best("final_eval_return")["lr"] == 3e-4
    assert main(["sweep", *SAC_FLAGS, "--out", str(tmp_path / "a")]) == 0
    text = capsys.readouterr().out
    assert ("final return: the mean return of the episodes that ended in each run's last 25 "
            "updates (200 steps per env); ranked by final_return") in text
    assert "no episode ended" not in text and "best: lr=0.003 (final return 0.0)" in text
    assert main(["sweep", *SAC_FLAGS, "--rank-by", "final_eval_return", "--out",
                 str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert "ranked by final_eval_return" in text and "best: lr=0.0003 (final eval -100.0)" in text
    assert strict_json((tmp_path / "b" / "best.json").read_text())["lr"] == 3e-4
    assert main(["sweep", *SAC_FLAGS[:-7], "--grid", "lr=1e-3", "--rank-by",
                 "final_eval_return"]) == 2  # without --eval-every: nothing to rank by
    assert "--rank-by final_eval_return: the runs are evaluated only with --eval-every" in \
        capsys.readouterr().err
    from jaxrl_async.run.sinks import final_window  # 200 steps / 8 per update; 500 / 8; 2 updates

    assert result.final_window == 25
    assert [final_window(c) for c in (jra.PPOConfig(), jra.DQNConfig(), tiny_ppo())] == [10, 63, 2]


def test_a_sweep_directory_round_trips(fake_sweep, tmp_path, monkeypatch, capsys):
    calls, result = fake_sweep
    out = tmp_path / "sweep"
    assert main(["sweep", *SAC_FLAGS, "--out", str(out)]) == 0
    capsys.readouterr()
    sweep_file = strict_json((out / "config.json").read_text())
    assert sweep_file["grid"] == {"lr": [3e-4, 1e-3, 3e-3]} and sweep_file["seeds"] == 1
    # config.json reruns the sweep: the same base config, grid and seeds
    assert main(["sweep", "--config", str(out / "config.json"), "--out", str(tmp_path / "again"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert calls[1] == calls[0]
    # best.json trains the best config
    best = strict_json((out / "best.json").read_text())
    assert best["from_sweep"]["config"] == 2 and best["from_sweep"]["rank_by"] == "final_return"

    class Trained(Exception):
        pass

    def train(cfg, **kwargs):
        raise Trained(cfg)

    monkeypatch.setattr(importlib.import_module("jaxrl_async.run.train"), "train", train)
    with pytest.raises(Trained) as trained:
        main(["train", "--config", str(out / "best.json"), "--no-progress"])
    assert trained.value.args[0] == result.configs[2]
    # eval, load_config and train --config on the sweep say what to pass instead
    instead = (f"rerun the sweep with `jaxrl-async sweep --config {out / 'config.json'}`",
               f"`jaxrl-async train --config {out / 'best.json'} --run-dir RUN`")
    assert main(["eval", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} is a sweep directory (jaxrl-async sweep's output), not a run directory" in err
    assert all(x in err for x in instead)
    with pytest.raises(jra.CheckpointError, match="is a sweep directory"):
        jra.load_config(out)
    with pytest.raises(ValueError, match="is a sweep file .* not a run file"):
        jra.load_config(out / "config.json")


def test_a_smaller_budget_is_refused_for_the_one_reason_that_applies(cli_run, capsys):
    run = cli_run[0]
    saved = jra.load_config(run)  # anneal_lr: a schedule over the budget, which --extend re-plans
    for extend in (False, True):
        with pytest.raises(jra.CheckpointError) as e:
            jra.train(dataclasses.replace(saved, total_timesteps=4), resume=run, extend=extend,
                      progress=False)
        assert "has trained 2 updates = 8 steps: total_timesteps=4 must be at least that" in \
            str(e.value) and "extend" not in str(e.value)
    assert main(["train", "--resume", str(run), "--total-timesteps", "4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "has trained 2 updates" in err and "--extend" not in err


def test_one_final_evaluation_everywhere(cli_run):
    run, printed = cli_run
    [line] = [x for x in printed.splitlines() if "evaluation" in x]
    assert line.startswith("  final evaluation (after update 2, made in training: 2 greedy "
                           "episodes on fresh envs): return ")
    summary = strict_json((run / "summary.json").read_text())
    evaluation = strict_json((run / "eval.json").read_text())
    last_row = strict_json((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last_row["eval_return"] == pytest.approx(summary["final_eval_return"], rel=1e-6)
    assert evaluation["mean_return"] == pytest.approx(summary["final_eval_return"], rel=1e-6)
    assert (evaluation["update"], evaluation["in_training"], evaluation["num_episodes"]) == \
        (2, True, 2)
    shown = re.search(r"return (\S+) ±", line).group(1)
    from jaxrl_async.run.sinks import format_return

    assert shown == format_return(summary["final_eval_return"]) == \
        format_return(evaluation["mean_return"])


def test_every_json_file_is_strict_json(cli_run, tmp_path):
    from jaxrl_async.run import sinks

    run = cli_run[0]
    assert strict_json((run / "summary.json").read_text())["final_return"] is None  # none ended
    for name in ("config.json", "eval.json", "metrics.jsonl"):
        for line in [(run / name).read_text()] if name.endswith(".json") else \
                (run / name).read_text().splitlines():
            strict_json(line)
    data = {"a": math.nan, "b": [np.float32(np.inf), {"c": np.array([1.0, -np.inf])}],
            "d": (np.nan, 2), "e": jax.numpy.asarray([np.nan, 3.0])}
    expected = {"a": None, "b": [None, {"c": [1.0, None]}], "d": [None, 2], "e": [None, 3.0]}
    sinks.write_json(tmp_path / "x.json", data)
    sinks.append_jsonl(tmp_path / "x.jsonl", data)
    assert strict_json((tmp_path / "x.json").read_text()) == expected
    assert strict_json((tmp_path / "x.jsonl").read_text()) == expected


def test_wandb_files_go_to_wandb_dir_when_the_user_set_it(fake_sweep, tmp_path, monkeypatch):
    from jaxrl_async.run.tracking import log_sweep

    inits = []

    class Run:
        id, project, summary = "run-id", "tests", {}

        def log(self, *args, **kwargs):
            pass

        def finish(self, *args, **kwargs):
            pass

    wandb = types.ModuleType("wandb")
    wandb.init = lambda **kwargs: inits.append(kwargs) or Run()
    wandb.Table, wandb.Image = (lambda **kwargs: kwargs), (lambda path: path)
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    (tmp_path / "run").mkdir()
    monkeypatch.delenv("WANDB_DIR", raising=False)
    jra.WandbSink(project="tests").on_run(tiny_ppo(), 0, tmp_path / "run")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "mine"))  # wandb.init(dir=None) reads it
    jra.WandbSink(project="tests").on_run(tiny_ppo(), 0, tmp_path / "run")
    assert [i["dir"] for i in inits] == [str(tmp_path / "run"), None]
    _, result = fake_sweep  # the same for a sweep's tracker run
    result.to_csv(tmp_path / "sweep" / "results.csv")
    log_sweep(tmp_path / "sweep", result.base, {}, result)
    monkeypatch.delenv("WANDB_DIR")
    log_sweep(tmp_path / "sweep", result.base, {}, result)
    assert [i["dir"] for i in inits[2:]] == [None, str(tmp_path / "sweep")]


# --------------------------------------------------------------------------- small wrongs
def test_eval_gif_is_quiet_on_a_headless_machine(cli_run, tmp_path, monkeypatch, capfd):
    pytest.importorskip("pygame")
    from PIL import Image

    for name in ("SDL_VIDEODRIVER", "XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    cfg = jra.load_config(cli_run[0])
    state = checkpoint.restore(cli_run[0], cfg)
    capfd.readouterr()
    path = jra.save_gif(state, cfg, tmp_path / "episode.gif", max_frames=8)
    assert "XDG_RUNTIME_DIR" not in capfd.readouterr().err  # SDL's line per frame
    with Image.open(path) as gif:
        assert gif.n_frames > 1


def test_the_sweep_progress_bar_shows_the_best_return_so_far():
    from jaxrl_async.search.sweep import _Progress

    class Bar:
        n, postfix = 0, ""

        def update(self, steps):
            self.n += steps

        def set_postfix_str(self, text):
            self.postfix = text

    bar = Bar()
    _Progress.active = _Progress(bar, [2, 2], 4)
    shown = []
    try:  # two devices report in turn; the second's runs do worse, then nothing ended
        for device, update, best in ((0, 1, 50.0), (1, 1, 20.0), (0, 2, np.nan), (1, 2, 30.0)):
            _Progress.tick(device, update, np.float32(best))
            shown.append(bar.postfix.split("best return=")[1])
    finally:
        _Progress.active = None
    assert shown == ["50.0", "50.0", "50.0", "50.0"]


def test_the_summary_header_names_the_algorithm_and_no_return_reads_minus_zero(
        tmp_path, monkeypatch, capsys):
    from jaxrl_async.runners.state import TrainResult

    metrics = {"episode_return_sum": np.array([-0.08, 0.0]), "episodes": np.array([2.0, 0.0]),
               "episode_return": np.array([-0.04, np.nan])}

    def train(cfg, **kwargs):
        return TrainResult(state=types.SimpleNamespace(update=2), metrics=metrics, timing={})

    monkeypatch.setattr(importlib.import_module("jaxrl_async.run.train"), "train", train)
    assert main(["train", "--algo", "recurrent_ppo", "--env", "CartPole-v1", "--num-envs", "2",
                 "--num-steps", "4", "--bptt-length", "4", "--num-minibatches", "1",
                 "--total-timesteps", "16", "--eval-episodes", "0", "--no-progress",
                 "--run-dir", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "Recurrent PPO on CartPole-v1 (sync runner), 16 steps"
    assert lines[2] == "  final return (episodes ended in the last 2 updates): 0.0"
    from jaxrl_async.run.sinks import format_return

    assert [REGISTRY[n][0]().title for n in REGISTRY] == [
        "PPO", "IMPALA", "DQN", "PQN", "SAC", "Recurrent PPO"]
    assert [format_return(x) for x in (-0.04, -0.05, 0.04, -1.26)] == ["0.0", "-0.1", "0.0",
                                                                        "-1.3"]


def test_a_grid_error_names_the_grid_not_a_flag_never_given(capsys):
    for item, message in (("num_envs=4,0", "PPOConfig.num_envs must be a positive integer"),
                          ("lr=-1,1e-3", "PPOConfig.lr must be > 0, got -1.0")):
        assert main(["sweep", "--grid", item, "--no-progress"]) == 2
        assert capsys.readouterr().err.startswith(f"error: --grid {item}: {message}")


def test_best_names_the_metrics_that_exist(fake_sweep):
    _, result = fake_sweep
    for call in (lambda: result.best("nope"), lambda: result.summary("nope"),
                 lambda: result.plot("nope")):
        with pytest.raises(ValueError, match="metric must be one of final_return, auc, "
                           "final_eval_return .*got 'nope'"):
            call()
    unevaluated = jra.SweepResult(**{**result.__dict__, "curves": {
        k: v for k, v in result.curves.items() if k != "eval_return"}})
    with pytest.raises(ValueError, match=r"no config has a final_eval_return, so none is best: "
                       r"the runs were not evaluated \(eval_every=0\)"):
        unevaluated.best("final_eval_return")


def test_one_seed_rule_for_train_and_sweep(tmp_path, capsys):
    rule = r"must be an integer in \[0, 2\*\*31\) \(the rule for every seed, train's and sweep's"
    for seed in (-1, 2**31, 2**40):
        assert main(["train", *TINY, "--seed", str(seed), "--run-dir", str(tmp_path / "r")]) == 2
        assert re.search(f"error: --seed {rule}", capsys.readouterr().err)
        with pytest.raises(ValueError, match=f"seed {rule}"):
            jra.train(tiny_ppo(), seed=seed, progress=False)
        with pytest.raises(ValueError, match=f"each of seeds {rule}"):
            jra.sweep(tiny_ppo(), {"lr": [1e-3]}, seeds=[0, seed], progress=False)
        (tmp_path / "run.yaml").write_text(f"algo: ppo\nseed: {seed}\n")
        with pytest.raises(ValueError, match=f"run.yaml: seed {rule}"):
            config_files.load_config_file(tmp_path / "run.yaml")
    assert not (tmp_path / "r").exists()


def test_a_sweep_rerun_from_its_config_file_uses_the_same_devices(tmp_path):
    """``sweep --config`` reads the file before anything else, and reading it imported gymnax,
    which starts JAX's backend: the rerun then found one CPU device where the first run had one
    per core, and its numbers differed. Both ways now spread the runs over the same devices."""
    import os
    import subprocess

    sweep_file = tmp_path / "config.json"
    sweep_file.write_text(json.dumps({
        "base": {"_type": "PPOConfig", "env": "CartPole-v1", "num_envs": 2, "num_steps": 2,
                 "total_timesteps": 8, "num_minibatches": 1, "update_epochs": 1},
        "grid": {"lr": [3e-4, 1e-3]}, "seeds": 1}))
    probe = ("import importlib, sys, jax\n"
             "s = importlib.import_module('jaxrl_async.search.sweep')\n"
             "def run_points(*a, **k):\n"
             "    print('DEVICES', jax.local_device_count()); sys.exit(0)\n"
             "s.run_points = run_points\n"
             "from jaxrl_async.cli.command import main\n"
             "main(sys.argv[1:])\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"

    def devices(*argv):
        out = subprocess.run([sys.executable, "-c", probe, "sweep", *argv, "--no-progress"],
                             capture_output=True, text=True, env=env, timeout=120,
                             cwd=tmp_path)
        found = re.search(r"DEVICES (\d+)", out.stdout)
        assert found, out.stdout + out.stderr
        return int(found.group(1))

    by_flags = devices("--algo", "ppo", "--num-envs", "2", "--grid", "lr=3e-4,1e-3")
    assert by_flags == (os.cpu_count() or 1)
    assert devices("--config", str(sweep_file)) == by_flags

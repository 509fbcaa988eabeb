"""What a new user trips on (issue 22): every resume failure is a ``CheckpointError``; ``eval
--gif`` without the render extra fails first and writes nothing, and ``eval`` keeps training's
evaluation; a NaN final return is explained and a sweep where no episode ended names no winner;
a budget that is not a whole number of updates warns; a finished run can be trained for longer
where nothing depends on its budget; the README states that sweeps refuse async configs."""

import contextlib
import dataclasses
import importlib
import io
import json
import re
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async import checkpoint
from jaxrl_async.algos import REGISTRY
from jaxrl_async.cli import main
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
    with contextlib.redirect_stdout(printed):
        code = main(["train", *TINY, "--eval-episodes", "2", "--run-dir", str(run_dir)])
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

    sweep_module = importlib.import_module("jaxrl_async.sweep")  # jra.sweep is the function
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
    evaluate = importlib.import_module("jaxrl_async.evaluate")
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

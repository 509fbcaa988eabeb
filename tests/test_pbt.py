"""Population-based training and successive halving inside the compiled sweep: the exploit
mechanics against hand-computed NumPy references (ranking, the copy, the perturbation within
bounds, the lineage), determinism (a seed reproduces a run bit for bit; with no exploit it is
the random search of the same population), bad input named before anything compiles, and
checkpoint/resume."""

import contextlib
import dataclasses
import importlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.runners.common import compiler_options
from jaxrl_async.search import exploit
from jaxrl_async.search.population import Space
from jaxrl_async.search.sweep import _stack, count_compiles

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, num_minibatches=1,
                     update_epochs=1, hidden_sizes=(16,), total_timesteps=4 * 8 * 8,
                     log_every=4, fast_compile=True)  # 8 updates; ~40% less compile
pbt = importlib.import_module("jaxrl_async.search.pbt")  # jra.pbt is the function
SPACE = {"lr": jra.LogUniform(1e-4, 1e-2), "ent_coef": [0.0, 0.01, 0.05], "gamma":
         jra.Uniform(0.9, 0.999)}
N, SEEDS = 4, (0, 3)


def reference_ranks(scores):
    """Rank 0 = highest score; NaN last; ties to the lower index."""
    key = [(np.inf if np.isnan(x) else -x, i) for i, x in enumerate(scores)]
    order = [i for _, i in sorted(key)]
    return np.array(order), np.argsort(order)


# --------------------------------------------------------------------------- mechanics
def test_rank_matches_numpy_with_ties_and_nan():
    rng = np.random.default_rng(0)
    for _ in range(20):
        scores = rng.integers(0, 4, 9).astype(np.float32)  # many ties
        scores[rng.random(9) < 0.2] = np.nan
        order, ranks = jax.jit(exploit.rank)(jnp.asarray(scores))
        want_order, want_ranks = reference_ranks(scores)
        np.testing.assert_array_equal(order, want_order)
        np.testing.assert_array_equal(ranks, want_ranks)


def test_truncation_and_halving_sources_by_hand():
    scores = jnp.array([5.0, 1.0, 3.0, 2.0, 4.0, 0.0])  # order: 0 4 2 3 1 5
    order, ranks = exploit.rank(scores)
    # bottom 2 (members 1, 5) take ranks choice = [_, 1, _, _, _, 0] -> members 4 and 0
    choice = jnp.array([0, 1, 0, 0, 0, 0], jnp.int32)
    np.testing.assert_array_equal(exploit.sources(order, ranks, 2, choice), [0, 4, 2, 3, 4, 0])
    np.testing.assert_array_equal(exploit.sources(order, ranks, 0, choice), np.arange(6))
    # halving, keep 2: ranks 2.. copy ranks 0, 1, 0, 1 (members 0 and 4)
    np.testing.assert_array_equal(exploit.halving(scores, jnp.int32(2)), [0, 0, 0, 4, 4, 4])
    np.testing.assert_array_equal(exploit.halving(scores, jnp.int32(6)), np.arange(6))
    # truncation: the bottom quarter copies from the top quarter, whatever the key draws
    rng = np.random.default_rng(1)
    truncation = jax.jit(exploit.truncation, static_argnums=2)
    for i in range(10):
        s = rng.normal(size=8)
        source = np.asarray(truncation(jax.random.key(i), jnp.asarray(s), 0.25))
        want_order, _ = reference_ranks(s)
        bottom, top = set(want_order[-2:]), set(want_order[:2])
        for m in range(8):
            assert (source[m] in top) if m in bottom else source[m] == m


def test_copy_gives_the_source_state_exactly():
    tree = {"params": jnp.arange(12.0).reshape(4, 3), "opt": (jnp.arange(4), jnp.ones((4, 2)))}
    source = jnp.array([2, 1, 2, 0])
    copied = exploit.copy(tree, source)
    for m, s in enumerate([2, 1, 2, 0]):
        for a, b in zip(jax.tree.leaves(copied), jax.tree.leaves(tree)):
            np.testing.assert_array_equal(a[m], b[s])


def test_perturbation_stays_within_bounds_and_moves_only_the_replaced():
    space = Space.of(TINY, SPACE)
    n = 4096
    rng = np.random.default_rng(0)
    hypers = {"lr": jnp.asarray(np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), n)), jnp.float32),
              "ent_coef": jnp.asarray(rng.choice([0.0, 0.01, 0.05], n), jnp.float32),
              "gamma": jnp.asarray(rng.uniform(0.9, 0.999, n), jnp.float32),
              "vf_coef": jnp.full(n, 0.5, jnp.float32)}
    replaced = jnp.asarray(rng.random(n) < 0.5)
    explore = jax.jit(exploit.explore, static_argnums=(1, 4, 5))
    new = {k: np.asarray(v) for k, v in explore(
        jax.random.key(0), space, hypers, replaced, 0.25, 1.2).items()}
    old = {k: np.asarray(v) for k, v in hypers.items()}
    kept = ~np.asarray(replaced)
    for k in old:
        np.testing.assert_array_equal(new[k][kept], old[k][kept])
    np.testing.assert_array_equal(new["vf_coef"], old["vf_coef"])  # not in the space
    assert (new["lr"] >= np.float32(1e-4)).all() and (new["lr"] <= np.float32(1e-2)).all()
    assert (new["gamma"] >= np.float32(0.9)).all() and (new["gamma"] <= np.float32(0.999)).all()
    assert set(np.unique(new["ent_coef"])) <= {np.float32(v) for v in (0.0, 0.01, 0.05)}
    # about 3/4 are one step (x1.2 or /1.2, then clipped), the rest fresh draws
    r = np.asarray(replaced)
    step = np.isclose(new["lr"][r], np.clip(old["lr"][r] * 1.2, 1e-4, 1e-2), rtol=1e-5) | \
        np.isclose(new["lr"][r], np.clip(old["lr"][r] / 1.2, 1e-4, 1e-2), rtol=1e-5)
    assert 0.65 < step.mean() < 0.85, step.mean()
    assert (new["lr"][r] != old["lr"][r]).mean() > 0.9  # the replaced really move


def test_the_exploit_step_copies_learner_state_and_hypers_from_the_source():
    space = Space.of(TINY, SPACE)
    schedule = pbt.pbt_schedule(TINY, N, 2, fraction=0.25)
    configs = [dataclasses.replace(TINY, **p) for p in space.sample(N, 0)]
    cfgs = _stack([c for c in configs for _ in SEEDS])
    init = pbt._init(tuple(sorted(compiler_options(TINY).items())))  # the runs' own (cached)
    states = init(cfgs, np.asarray([s for _ in configs for s in SEEDS], np.int32))
    # different learner states per member, so a copy shows
    states = states._replace(learner=jax.tree.map(
        lambda x: x + jnp.arange(x.shape[0]).reshape(-1, *[1] * (x.ndim - 1)).astype(x.dtype),
        states.learner))
    scores = jnp.asarray([1.0, 5.0, 3.0, 4.0, 2.0, 0.0, 9.0, 8.0])  # run m*S+s, [N*S]
    new_cfgs, new_states, record = jax.jit(
        lambda c, s, x: pbt._exploit(schedule, space, jax.random.key(0), jnp.int32(0),
                                     jnp.int32(N - 1), False, c, s, x))(cfgs, states, scores)
    source = np.asarray(record["source"])  # [S, N]
    per_pop = np.asarray(scores).reshape(N, 2).T
    for s in range(2):
        order, _ = reference_ranks(per_pop[s])
        worst, best = order[-1], order[0]  # fraction 0.25 of 4: one replaced by one
        np.testing.assert_array_equal(source[s], [best if m == worst else m for m in range(N)])
        for m in range(N):
            r, src = m * 2 + s, source[s, m] * 2 + s
            for a, b in zip(jax.tree.leaves(new_states.learner), jax.tree.leaves(states.learner)):
                np.testing.assert_array_equal(a[r], b[src])
            moved = m == worst
            assert (np.asarray(new_states.key[r] != states.key[r])) == moved
            for f in ("vf_coef", "clip_eps"):  # outside the space: the source's
                assert getattr(new_cfgs, f)[r] == getattr(cfgs, f)[src]
            lr, old_lr = float(new_cfgs.lr[r]), float(cfgs.lr[src])
            assert (lr != old_lr) == moved and 1e-4 <= lr <= 1e-2 * (1 + 1e-6)


def test_halving_schedule_rungs():
    s = pbt.halving_schedule(dataclasses.replace(TINY, total_timesteps=4 * 8 * 18), 9, 3, 3)
    assert (s.segment, s.rest, s.keeps) == (2, 0, (3, 9, 1, 9, 9, 9, 9, 9, 9))
    p = pbt.pbt_schedule(TINY, 8, 3, fraction=0.25)
    assert (p.segment, p.rest, p.keeps, p.exploits) == (3, 2, (6, 6), 2)


# --------------------------------------------------------------------------- whole runs
@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory):
    # checkpointed every 2 segments of 4 (two compiled calls), as the resumed run below
    return jra.pbt(TINY, SPACE, population=N, ready_every=2, seeds=SEEDS, seed=7,
                   progress=False, checkpoint_dir=tmp_path_factory.mktemp("pbt"),
                   checkpoint_every=2)


def test_a_seed_reproduces_a_pbt_run_bit_for_bit(pbt_run):
    # all four segments in one compiled call, no checkpoint: the same numbers
    again = jra.pbt(TINY, SPACE, population=N, ready_every=2, seeds=SEEDS, seed=7,
                    progress=False)
    for k in pbt_run.curves:
        np.testing.assert_array_equal(pbt_run.curves[k], again.curves[k], err_msg=k)
    for k in pbt_run.lineage:
        np.testing.assert_array_equal(pbt_run.lineage[k], again.lineage[k], err_msg=k)
    assert pbt_run.lineage["exploited"].tolist() == [True, True, True, False]
    assert pbt_run.timing["exploits"] == 3


def test_lineage_matches_a_numpy_reference(pbt_run):
    lin = pbt_run.lineage
    for e in range(3):
        for s in range(len(SEEDS)):
            order, _ = reference_ranks(lin["score"][e, s])
            source = lin["source"][e, s]
            assert source[order[-1]] == order[0]  # one of four: the worst copies the best
            assert all(source[m] == m for m in order[:-1])
            # the score is the segment's mean return, recomputed from the curves
            window = slice(2 * e, 2 * e + 2)
            total = pbt_run.curves["episode_return_sum"][:, s, window].sum(-1)
            count = pbt_run.curves["episodes"][:, s, window].sum(-1)
            np.testing.assert_allclose(lin["score"][e, s], total / count, rtol=1e-5)
            # the copy's values are the source's, perturbed within bounds; the others keep
            for f in ("lr", "gamma"):
                before, after = lin[f][e, s], lin[f][e + 1, s]
                np.testing.assert_array_equal(after[order[:-1]], before[order[:-1]])
                lo, hi = SPACE[f]
                assert lo * (1 - 1e-6) <= after[order[-1]] <= hi * (1 + 1e-6)
    path = pbt_run.ancestry(0, 1)
    assert len(path) == 5 and path[-1] == 0
    for e, (a, b) in enumerate(zip(path[:-1], path[1:])):
        assert lin["source"][e, 1, b] == a


def test_ready_every_longer_than_the_run_is_the_random_search(devices):
    # both spread over the suite's 4 devices, 2 runs each: the same per-device program
    plain = jra.pbt(TINY, SPACE, population=N, ready_every=100, seeds=SEEDS, seed=7,
                    progress=False)
    search = jra.random_search(TINY, SPACE, N, seeds=SEEDS, seed=7, num_devices=len(devices),
                               progress=False)
    assert plain.timing["devices"] == search.timing["devices"] == len(devices)
    assert plain.timing["exploits"] == 0 and plain.lineage["source"].shape == (0, 2, N)
    for k in search.curves:
        np.testing.assert_array_equal(plain.curves[k], search.curves[k], err_msg=k)
    for a, b in zip(jax.tree.leaves(plain.params), jax.tree.leaves(search.params)):
        np.testing.assert_array_equal(a, b)


def test_successive_halving_keeps_the_top_at_each_rung(tmp_path):
    # segments as long as PBT's above: the same compiled program, halving's exploit
    with count_compiles() as compiled:
        result = jra.successive_halving(TINY, SPACE, population=N, eta=2, rungs=3, seeds=SEEDS,
                                        progress=False, checkpoint_dir=tmp_path,
                                        checkpoint_every=2)
    assert not any("segments" in name for name in compiled), compiled
    lin = result.lineage
    assert lin["exploited"].tolist() == [True, True, False, False]
    for e, keep in ((0, 2), (1, 1)):
        for s in range(len(SEEDS)):
            order, _ = reference_ranks(lin["score"][e, s])
            source = lin["source"][e, s]
            assert sorted(set(source)) == sorted(order[:keep])
            for j, m in enumerate(order[keep:]):
                assert source[m] == order[j % keep]
            for f in SPACE:  # copies, not perturbed
                np.testing.assert_array_equal(lin[f][e + 1, s], lin[f][e, s][source])
    assert np.isfinite(result.best()["final_return"])


def test_checkpoint_and_resume_equals_the_uninterrupted_run(pbt_run, tmp_path, monkeypatch):
    from jaxrl_async.search import population_checkpoint as ckpt

    save, calls = ckpt.save, []

    def stop_after_one(*args):
        save(*args)
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        jra.pbt(TINY, SPACE, population=N, ready_every=2, seeds=SEEDS, seed=7, progress=False,
                checkpoint_dir=tmp_path, checkpoint_every=2)
    assert len(calls) == 1  # stopped after 2 of the 4 segments
    monkeypatch.setattr(ckpt, "save", save)
    with count_compiles() as compiled:
        resumed = jra.resume_population(tmp_path, progress=False)
    assert not any("segments" in name for name in compiled), compiled  # the same program
    for k in pbt_run.curves:
        np.testing.assert_array_equal(pbt_run.curves[k], resumed.curves[k], err_msg=k)
    for k in pbt_run.lineage:
        np.testing.assert_array_equal(pbt_run.lineage[k], resumed.lineage[k], err_msg=k)
    # resuming the finished population trains nothing: no bar, no SPS, the same result
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        again = jra.resume_population(tmp_path, progress=True)
    assert again.timing["steps_trained"] == 0 and "step" not in err.getvalue()
    np.testing.assert_array_equal(again.final_return, resumed.final_return)


def test_result_table_and_plot(pbt_run, tmp_path):
    rows = pbt_run.rows
    assert len(rows) == N * len(SEEDS) and {"initial_lr", "lr", "root"} <= set(rows[0])
    best = pbt_run.best()
    assert best["final_return"] == np.nanmax(pbt_run.final_return)
    assert best["cfg"].lr == best["lr"]
    pbt_run.to_csv(tmp_path / "members.csv")
    pbt_run.plot(path=tmp_path / "population.png")
    assert (tmp_path / "population.png").stat().st_size > 0


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("space, kwargs, words", [
    ({"num_envs": [4, 8]}, {}, ["num_envs", "static", "lr"]),
    ({"hidden": [4]}, {}, ["no field", "hidden"]),
    ({"gamma": jra.Uniform(0.9, 1.5)}, {}, ["gamma", "1.5", "[0.0, 1.0]"]),
    ({"lr": jra.LogUniform(0.0, 1e-3)}, {}, ["lr", "0 < low < high"]),
    ({"ent_coef": [-0.1, 0.0]}, {}, ["ent_coef", "-0.1", ">= 0"]),
    ({"lr": jra.LogUniform(1e-4, 1e-3)}, {"ready_every": 0}, ["ready_every", ">= 1"]),
    ({"lr": jra.LogUniform(1e-4, 1e-3)}, {"fraction": 0.7}, ["fraction", "(0, 0.5]"]),
    ({"lr": jra.LogUniform(1e-4, 1e-3)}, {"score": "auc"}, ["score", "return, eval"]),
])
def test_bad_input_is_named_before_anything_compiles(space, kwargs, words):
    with count_compiles() as compiled, pytest.raises(ValueError) as e:
        jra.pbt(TINY, space, population=N, **{"ready_every": 2, **kwargs}, progress=False)
    for word in words:
        assert word in str(e.value), (word, str(e.value))
    assert compiled == []


def test_halving_bad_input_is_named():
    with pytest.raises(ValueError, match="eta\\*\\*\\(rungs-1\\) = 8"):
        jra.successive_halving(TINY, SPACE, population=4, eta=2, rungs=4, progress=False)
    with pytest.raises(ValueError, match="eta must be an integer >= 2"):
        jra.successive_halving(TINY, SPACE, population=4, eta=1, progress=False)


def test_command_line_with_tracking_and_resume(pbt_run, tmp_path, monkeypatch, capsys):
    """``jaxrl-async pbt``: TINY and SPACE from flags (the compiled program is reused), the
    population directory, the population logged offline as one tracker run, ``--resume``."""
    import json

    from jaxrl_async.cli.command import main

    base = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--num-minibatches",
            "1", "--update-epochs", "1", "--hidden-sizes", "16", "--total-timesteps", "256",
            "--log-every", "4", "--fast-compile", "--no-progress"]
    flags = [*base, "--space", "lr=log:1e-4:1e-2", "--space", "ent_coef=0,0.01,0.05",
             "--space", "gamma=uniform:0.9:0.999", "--population", "4", "--ready-every", "2",
             "--seeds", "2", "--sample-seed", "7"]
    track = []
    if importlib.util.find_spec("wandb") is not None:
        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_SILENT", "true")
        track = ["--track", "--wandb-project", "tests"]
    out = tmp_path / "pop"
    with count_compiles() as compiled:
        assert main(["pbt", *flags, "--out", str(out), *track]) == 0
    assert not any("segments" in name for name in compiled), compiled
    text = capsys.readouterr().out
    assert "pbt: 4 members x 2 seeds = 8 runs, 3 exploit steps in the program" in text
    best = json.loads((out / "best.json").read_text())
    assert best["_type"] == "PPOConfig" and 1e-4 <= best["lr"] <= 1e-2
    lineage = json.loads((out / "lineage.json").read_text())
    np.testing.assert_array_equal(np.asarray(lineage["source"])[:, 0],  # seed 0: the same
                                  pbt_run.lineage["source"][:, 0])
    assert len((out / "members.csv").read_text().splitlines()) == 9
    if track:
        from tests.wandb_offline import tracker_runs

        [session] = tracker_runs(out)
        assert {"best/lr", "best/final_return", "population_plot"} <= session["summary"]
        assert session["config"]["population"]["schedule"]["kind"] == "pbt"
    assert main(["pbt", "--resume", str(out), "--no-progress"]) == 0  # finished: reassembled
    assert json.loads((out / "lineage.json").read_text()) == lineage
    assert main(["halving", *base, "--space", "num_envs=4,8"]) == 2
    assert "--space num_envs=4,8: PPOConfig.num_envs is static" in capsys.readouterr().err

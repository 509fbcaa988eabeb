"""The published settings of experiments/reproduce: every suite row has its config file, in the
format of a run directory's config.json (no compile here; one file is loaded and validated)."""

import dataclasses
import json
import math

import pytest

from experiments.reproduce.__main__ import CONFIGS, load
from experiments.reproduce.suites import SUITES
from jaxrl_async.algos import known_configs


def test_every_row_has_its_published_settings_file():
    names = {row.config for rows in SUITES.values() for row in rows}
    assert names == {p.stem for p in CONFIGS.glob("*.json")}  # no row without a file, and back
    classes = known_configs()
    for rows in SUITES.values():
        for row in rows:
            data = json.loads((CONFIGS / f"{row.config}.json").read_text())
            fields = {f.name for f in dataclasses.fields(classes[data["_type"]])}
            assert set(data) - {"_type"} <= fields, row.config
            host = data["env"].partition(":")[0] in ("gymnasium", "envpool")
            assert (data["eval_every"] > 0 or host) and row.protocol in ("train", "eval")
            assert math.isnan(row.published) or len(row.source.commit) == 40
    blines = load("gymnax_blines_ppo_breakout")  # gymnax-blines agents/<env>/ppo.yaml
    assert (blines.num_envs, blines.num_steps, blines.num_minibatches, blines.update_epochs,
            blines.gamma, blines.lr, blines.hidden_sizes, blines.total_timesteps,
            blines.minibatch_layout) == (
        64, 128, 8, 4, 0.999, 5e-4, (256, 256), 10_000_000, "sample")


def test_only_keeps_the_other_rows_of_results_json(tmp_path, monkeypatch):
    # `--only ROW` runs one row; the rows an earlier run wrote stay in results.json and the
    # table (a row run again replaces its own), in the suite's order. No training here.
    import experiments.reproduce.__main__ as reproduce

    def fake(config: str, mean: float) -> dict:
        return {"config": config, "env": "E", "algo": "a", "budget": 1, "seeds": 1,
                "published": 1.0, "published_std": None, "source": "s", "protocol": "train",
                "note": "", "train_mean": mean, "train_std": 0.0, "eval_mean": mean,
                "eval_std": 0.0, "eval_episodes": 1, "eval_greedy": True, "wall_s": 1.0,
                "sps": 1.0, "curves": {}}

    earlier = [fake("cleanrl_ppo_cartpole", 1.0), fake("cleanrl_dqn_cartpole", 2.0)]
    (tmp_path / "results.json").write_text(json.dumps(earlier))
    monkeypatch.setattr(reproduce, "plot", lambda row, path: None)
    monkeypatch.setattr(reproduce, "run_row",  # a row with no evaluation: NaN
                        lambda row, seeds, budget: fake(row.config, 3.0) | {
                            "eval_mean": math.nan, "eval_std": math.nan,
                            "curves": {"eval_return": [[math.nan, 1.0]]}})
    reproduce.main(["--suite", "classic", "--only", "rlzoo_sac_pendulum",
                    "cleanrl_dqn_cartpole", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "results.json").read_text(),  # strict JSON: NaN is null
                      parse_constant=lambda c: pytest.fail(f"bare {c} in results.json"))
    assert [(r["config"], r["train_mean"]) for r in rows] == [
        ("cleanrl_ppo_cartpole", 1.0), ("cleanrl_dqn_cartpole", 3.0),
        ("rlzoo_sac_pendulum", 3.0)]
    assert rows[1]["eval_mean"] is None and rows[1]["curves"]["eval_return"] == [[None, 1.0]]
    text = (tmp_path / "table.md").read_text()
    assert "--only rlzoo_sac_pendulum cleanrl_dqn_cartpole" in text and text.count("| E |") == 3
    assert text.count("| n/a (1 greedy) |") == 2
    reproduce.main(["--suite", "classic", "--replot", "--out", str(tmp_path)])  # reads it back


def test_rlzoo_ppo_pendulum_carries_the_rlzoo_entry_over():
    # The settings file holds RL Zoo's hyperparams/ppo.yml Pendulum-v1 entry on SB3's PPO
    # defaults; the first file carried clip_value=True over (SB3: clip_range_vf=None, no value
    # clipping), which stalls the value function on Pendulum's returns (-1145 against -172).
    from experiments.reproduce.suites import RLZOO_PPO_PENDULUM, rlzoo_ppo_fields

    cfg = load("rlzoo_ppo_pendulum")
    fields = rlzoo_ppo_fields(RLZOO_PPO_PENDULUM)
    assert {k: getattr(cfg, k) for k in fields} == fields
    assert RLZOO_PPO_PENDULUM["n_steps"] == 1024 and "batch_size" not in RLZOO_PPO_PENDULUM
    assert (cfg.num_envs, cfg.num_steps, cfg.num_minibatches, cfg.update_epochs) == (
        4, 1024, 4 * 1024 // 64, 10)  # SB3 batch_size 64: 64 minibatches of single samples
    assert cfg.total_timesteps == 102_400  # SB3 rolls out until 1e5 steps: 25 updates
    assert (cfg.gamma, cfg.gae_lambda, cfg.lr, cfg.clip_eps, cfg.ent_coef) == (
        0.9, 0.95, 1e-3, 0.2, 0.0)
    assert cfg.clip_value is False and not cfg.anneal_lr and not cfg.normalize_obs
    assert cfg.vf_coef == 1.0 and cfg.max_grad_norm == 0.5  # SB3 0.5 * mse = ours 1.0 * mse/2
    assert cfg.minibatch_layout == "sample" and cfg.hidden_sizes == (64, 64)
    assert cfg.activation == "tanh" and cfg.normalize_advantages

"""The published settings of experiments/reproduce: every suite row has its config file, in the
format of a run directory's config.json (no compile here; one file is loaded and validated)."""

import dataclasses
import json
import math

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
            assert data["eval_every"] > 0 and row.protocol in ("train", "eval")
            assert math.isnan(row.published) or len(row.source.commit) == 40
    blines = load("gymnax_blines_ppo_breakout")  # gymnax-blines agents/<env>/ppo.yaml
    assert (blines.num_envs, blines.num_steps, blines.num_minibatches, blines.update_epochs,
            blines.gamma, blines.lr, blines.hidden_sizes, blines.total_timesteps) == (
        64, 128, 8, 4, 0.999, 5e-4, (256, 256), 10_000_000)

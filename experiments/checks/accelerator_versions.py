"""The versions the accelerator check runs with, as one JSON line: Python, jax, jaxlib, the jax
plugins, flax, optax, chex, numpy, gymnax and this library, and the devices jax sees.

    python experiments/checks/accelerator_versions.py  (the `versions` step of accelerator_check.sh)

Imports jax and lists its devices; nothing compiles (a second or two).
"""

from __future__ import annotations

import json
import platform
from importlib.metadata import PackageNotFoundError, distributions, version

import jax

NAMES = ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "gymnax", "orbax-checkpoint",
         "jaxrl_async")


def installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main() -> None:
    plugins = sorted({f"{d.metadata['Name']} {d.version}" for d in distributions()
                      if d.metadata["Name"] and d.metadata["Name"].lower().startswith("jax-cuda")})
    print(json.dumps({"python": platform.python_version(),
                      **{name: installed(name) for name in NAMES},
                      "plugins": plugins,
                      "devices": [str(d) for d in jax.devices()]}))


if __name__ == "__main__":
    main()

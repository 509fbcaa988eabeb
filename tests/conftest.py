"""Test setup: 4 forced CPU devices (for shard_map/pmap and actor/learner splits), set before
JAX is imported anywhere."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def devices():
    assert jax.local_device_count() >= 4, "conftest must set the device count before jax loads"
    return jax.local_devices()

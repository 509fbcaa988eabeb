"""Test setup: 4 forced CPU devices (for shard_map/pmap and actor/learner splits), set before
JAX is imported anywhere."""

import os
import shutil
import tempfile
import threading

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One XLA compilation cache for the whole run, fresh each run (so a local run costs what CI
# does): tests compile many identical programs (an uninterrupted and a resumed run, the same
# tiny config under several tests, CLI subprocesses), and XLA:CPU compiles are most of the
# suite's time. The first process of a run (pytest, or xdist's controller) makes the folder;
# the workers and every subprocess a test starts inherit it through the environment.
# ``count_compiles`` still sees a cache hit: jax reports it as a backend compile.
_CACHE_OWNER = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _CACHE_OWNER:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxrl_async_xla_cache_")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

import jax  # noqa: E402
import pytest  # noqa: E402


def pytest_unconfigure(config):
    if _CACHE_OWNER:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def devices():
    assert jax.local_device_count() >= 4, "conftest must set the device count before jax loads"
    return jax.local_devices()


# --------------------------------------------------------------------------- async runner helpers
def async_ppo(base: dict, runner: dict | None = None, **kw):
    """A PPOConfig of ``base`` updated by ``kw``, run by ``AsyncConfig(**runner)``."""
    import jaxrl_async as jra

    return jra.PPOConfig(**{**base, **kw}, runner=jra.AsyncConfig(**(runner or {})))


def runner_threads() -> list[threading.Thread]:
    """The async runner's threads still alive."""
    from jaxrl_async.runners import pipeline

    return [t for t in threading.enumerate() if t.name.startswith(pipeline.THREAD_PREFIX)]


def no_threads_left(threads_before: set[threading.Thread]) -> bool:
    """No runner thread alive, and no thread that was not there before."""
    return runner_threads() == [] and set(threading.enumerate()) <= threads_before


def compile_once(module, name: str, key):
    """Generator for a module-scoped fixture: patch ``module.name`` (a compile function) to
    compile once per ``key(*args)`` while the fixture lives."""
    cache, compile_fn = {}, getattr(module, name)

    def cached(*args):
        k = key(*args)
        if k not in cache:
            cache[k] = compile_fn(*args)
        return cache[k]

    patch = pytest.MonkeyPatch()
    patch.setattr(module, name, cached)
    yield
    patch.undo()


# --------------------------------------------------------------------------- the installed package
@pytest.fixture(scope="session")
def installed_package(tmp_path_factory):
    """The package built (sdist, then the wheel from it) and installed into a fresh venv outside
    the repository; the venv sees this environment's dependencies
    (experiments/checks/install_check.py --share-deps). Returns ``(python, sdist, wheel)``.
    Under xdist the workers share one build (the run's base folder, under a lock): the
    notebooks and the packaging tests land on different workers, and each build costs a wheel
    and a venv."""
    import fcntl
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "checks" / "install_check.py"
    spec = importlib.util.spec_from_file_location("install_check", path)
    install_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install_check)
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # base is popen-gwN inside this run's folder
        base = base.parent
    root = base / "installed"
    with open(base / "installed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = root / "venv" / "bin" / "python"
        if not (root / "done").exists():
            shutil.rmtree(root, ignore_errors=True)
            sdist, wheel = install_check.build(root)
            python = install_check.make_venv(root / "venv", wheel, "share-deps")
            (root / "done").write_text(f"{sdist}\n{wheel}\n")
        sdist, wheel = map(Path, (root / "done").read_text().split())
    return python, sdist, wheel, install_check


# --------------------------------------------------------------------------- the order of files
# make test spreads whole files over two workers (--dist loadfile) in collection order. With
# the longest files first (longest-processing-time-first), the last files handed out are short
# and the two workers end close together whatever the alphabet puts last. Longest first, as
# measured by make test --durations=0 (2396 s of tests in 1260 s of wall time on 2 cores, a
# loaded machine); the files not named (each under 20 s) keep their order, after these.
LONGEST_FIRST = ("test_host_envs", "test_async", "test_optuna_search",
                 "test_distributed_checkpoint", "test_user_trips", "test_entry_points",
                 "test_notebooks", "test_ppo", "test_host_runs", "test_pqn", "test_pbt",
                 "test_dqn", "test_pbt_devices", "test_distributed", "test_env_registry",
                 "test_algos_async", "test_checkpoint", "test_sac", "test_conv", "test_lag",
                 "test_sweep_static", "test_envs", "test_env_suites", "test_recurrent",
                 "test_distributed_sweep", "test_compile_cache", "test_networks",
                 "test_held_out", "test_data_order", "test_sweep", "test_sweep_chunks",
                 "test_eval_every", "test_normalization", "test_faults_checkpoint",
                 "test_envpool", "test_replay")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: files stay whole

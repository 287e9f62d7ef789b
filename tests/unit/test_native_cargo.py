"""The Rust unit tests of the native core's pure modules pass (``cargo test``).

``native/src/wire.rs`` and ``native/src/state_codec/`` (and the engine's pure Rust)
carry their own unit tests; they need no Python, so they run without the ``python``
feature that builds the extension module: ``cargo test --no-default-features``, in the
test profile (no LTO, unlike the release build of the extension module).
Where ``cargo`` is missing the native core cannot have been built here either, and
under ``CI=true`` it must be there (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from parsley import native

ROOT = Path(__file__).resolve().parents[2]


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.mark.slow
def test_cargo_test_of_the_pure_rust_modules() -> None:
    cargo = shutil.which("cargo")
    if cargo is None:
        # Nothing to compile the tests with; the Python reference runs (parsley/native.py).
        assert not _ci(), "CI=true but cargo is not on PATH"
        assert native.ENGINE == "python" or native.BUILT is not None
        return
    env = dict(os.environ)
    version = subprocess.run([cargo, "--version"], capture_output=True, text=True, check=True)
    minor = re.match(r"cargo 1\.(\d+)\.", version.stdout)
    if minor and int(minor.group(1)) < 68:  # as the Makefile: Debian 12's cargo, sparse index
        env |= {"CARGO_UNSTABLE_SPARSE_REGISTRY": "true", "RUSTC_BOOTSTRAP": "1"}
    run = subprocess.run(
        # The test profile (unoptimized, no LTO): about 7 s from a clean target under
        # load, against 28 s for --release with thin LTO and one codegen unit.
        [cargo, "test", "--no-default-features",
         "--manifest-path", str(ROOT / "native" / "Cargo.toml")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    passed = sum(int(n) for n in re.findall(r"test result: ok\. (\d+) passed", run.stdout))
    assert passed >= 11, run.stdout[-2000:]

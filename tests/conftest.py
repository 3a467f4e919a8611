"""Shared fixtures. CPU tests always run; GPU tests skip with a reason unless a GPU of the step's
arch is present (Hopper: compute capability exactly (9, 0); Blackwell: exactly (10, 0))."""

import pytest

from harness.core.provenance import gpu_capability
from harness.core.steps import discover

STEPS = discover()
STEP_ARCHS = [(s, arch) for s in STEPS for arch in s.info.archs]


def step_id(value):
    return value.id if hasattr(value, "id") else str(value)


@pytest.fixture(scope="session")
def capability():
    return gpu_capability()


def require_gpu_for(step, capability):
    """Skip (with the reason) unless this machine has a GPU that ``step`` targets."""
    if capability is None:
        pytest.skip(f"no CUDA GPU here; step {step.id} needs {' or '.join(step.info.archs)}")
    arch = step.info.arch_for_capability(capability)
    if arch is None:
        pytest.skip(f"GPU is sm_{capability[0]}{capability[1]}; step {step.id} targets "
                    f"{', '.join(step.info.archs)} (compute capability exactly "
                    f"{' or '.join(str(c) for c in step.info.capabilities)})")
    return arch

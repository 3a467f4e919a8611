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


# Long tests first (each some seconds on one core: a compile nothing else shares, a child process,
# many replays), so that pytest's workers (make test: -n auto --dist worksteal) share them out early
# instead of one worker finishing alone on a long one.
FIRST = ("test_every_blackwell_step_compiles_with_tmem_guardrails",
         "test_protocol_never_deadlocks_and_every_wait_observes_its_own_phase",
         "test_sm100a_build", "test_sm90a_build", "test_b13_launches_clusters_of_two_ctas",
         "test_b14_launches_one_cta_per_b200_sm_in_pairs", "test_the_gpu_machine_builds_the_same_machine_code",
         "test_each_experiment_applies_to_its_base_and_compiles", "test_a_later_process_reads_a_published_compile",
         "test_a_process_asking_for_a_step_another_is_compiling")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: next((i for i, name in enumerate(FIRST) if item.name.startswith(name)), len(FIRST)))


def pytest_configure(config):
    """A pytest worker (-n) computes the CPU references with one thread: the workers already take
    every core, and torch's own threads on top of them only contend."""
    if hasattr(config, "workerinput"):
        import torch
        torch.set_num_threads(1)

"""The ladder's harness, in wings that import only the wings before them (tests/test_structure.py):
core (steps, results, provenance, toolchain), compiler (a step or FA4 compiled on a CPU and read),
model (what bounds a step; barrier protocols; smem), timeline, gpu (jobs in child processes),
report (generated blocks, plot) and cli (the ``ladder`` command). CONTRIBUTING.md says where a new
command, model or generated block goes."""

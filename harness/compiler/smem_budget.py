"""A step's shared memory as the kernel allocates it: the size of its shared-storage struct.

Steps from h06 on build their struct in ``make_shared_storage`` (tiles, pipeline stages and
mbarriers, with alignment), the same function the host uses for the launch's dynamic smem. This
evaluates it on the CPU, in a host-side ``@cute.jit`` function, so a test can hold it to the
hardware's budget without a GPU.
"""

from __future__ import annotations

import inspect

SMEM_PER_CTA_LIMIT = 227 * 1024     # opt-in maximum dynamic shared memory per block, sm_90 and sm_100 alike


def shared_storage_bytes(step) -> int:
    import cutlass
    import cutlass.cute as cute

    from ladder.contract import set_target_arch
    module = step.module
    if not hasattr(module, "make_shared_storage"):
        raise ValueError(f"{step.id} builds its shared storage inside host(); no make_shared_storage")
    set_target_arch(step.info.archs[0])
    found = {}

    # A 2-CTA step's layouts are the per-CTA parts of its tiled MMAs' operands: built from them.
    needs_mmas = bool(inspect.signature(module.make_smem_layouts).parameters)

    @cute.jit
    def measure():
        layouts = module.make_smem_layouts(*module.make_tiled_mmas(cutlass.BFloat16)) if needs_mmas \
            else module.make_smem_layouts()
        found["bytes"] = module.make_shared_storage(cutlass.BFloat16, *layouts).size_in_bytes()

    measure()
    return int(found["bytes"])

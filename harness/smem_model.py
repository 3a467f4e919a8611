"""Shared-memory wavefronts of a step's thread-issued stores, from its layouts and copies alone.

For each store the kernel issues from threads (the synchronous Q/K/V copies, P's register->smem
store), take warp 0's first store instruction: each thread's first ``vec`` elements, as the step's
own tiled copy assigns them and its own smem layout places them (swizzle included). Shared memory
has 32 banks of 4 bytes and serves one 128-byte wavefront per cycle; a warp instruction needs as
many wavefronts as the most distinct 4-byte words any one bank must deliver. Runs on the CPU:
CuTe's layout algebra is evaluated in a host-side ``@cute.jit`` function.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

BANKS, BANK_BYTES = 32, 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES
ELEMENT_BYTES = 2                     # bf16
WARP = 32


@dataclass(frozen=True)
class StoreCost:
    name: str
    bytes_per_thread: int
    wavefronts: int
    minimal: int

    @property
    def is_minimal(self) -> bool:
        return self.wavefronts == self.minimal


def swizzle_params(layout) -> tuple[int, int, int]:
    """(B, M, S) of a composed layout's swizzle ``S<B,M,S>``; (0, 4, 3) for a plain layout."""
    inner = getattr(layout, "inner", None)
    m = re.search(r"S<(\d+),(\d+),(\d+)>", str(inner)) if inner is not None else None
    return tuple(int(g) for g in m.groups()) if m else (0, 4, 3)


def swizzle(byte_offset: int, bms: tuple[int, int, int]) -> int:
    """CuTe's Swizzle<B,M,S> on a byte offset: XOR bits [M, M+B) with bits [M+S, M+S+B)."""
    b, m, s = bms
    mask = ((1 << b) - 1) << (m + s)
    return byte_offset ^ ((byte_offset & mask) >> s)


def wavefronts(thread_bytes: list[list[int]]) -> tuple[int, int]:
    """(wavefronts needed, minimum possible) for one warp instruction; each inner list holds the
    byte addresses one thread writes."""
    words_per_bank: dict[int, set[int]] = {}
    touched = set()
    for addrs in thread_bytes:
        for a in addrs:
            word = a // BANK_BYTES
            words_per_bank.setdefault(word % BANKS, set()).add(word)
            touched.add(a)
    needed = max(len(w) for w in words_per_bank.values())
    return needed, math.ceil(len(touched) / WAVEFRONT_BYTES)


def store_costs(step) -> list[StoreCost]:
    """Warp 0's first store of each thread-issued smem store of ``step`` (Q, K, V copies and P)."""
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ladder.contract import set_target_arch
    set_target_arch(step.info.archs[0])                  # MMA atoms check the target arch
    module = step.module
    dtype = cutlass.BFloat16

    has_copies = hasattr(module, "make_gmem_copy")    # from h04 on, TMA writes Q, K and V
    found = {}                                         # facts learned while tracing

    def plain(layout):
        """The layout without its swizzle; for a stack of tiles (a ring stage or a second Q
        tile as a third mode), the first tile: every tile is laid out alike."""
        outer = layout.outer if hasattr(layout, "outer") else layout
        return cute.select(outer, mode=[0, 1]) if cute.rank(outer) == 3 else outer

    @cute.jit
    def element_offsets(buffer, q_out, k_out, v_out, p_out):
        sQ_layout, sK_layout, sVt_layout, *sP_layout = module.make_smem_layouts()
        found["has_p"] = len(sP_layout) == 1            # from h06 on, P stays in registers
        tiled_mma, _ = module.make_tiled_mmas(dtype)
        stores = []
        if cutlass.const_expr(found["has_p"] and hasattr(module, "row_piece")):
            # Blackwell: thread t stores its own row t of P, one piece of columns at a time.
            stores.append((cute.make_tensor(buffer.iterator, plain(sP_layout[0])), p_out, None))
        elif cutlass.const_expr(found["has_p"]):
            stores.append((cute.make_tensor(buffer.iterator, plain(sP_layout[0])), p_out,
                           module.make_fragment_store(dtype, tiled_mma)))
        if cutlass.const_expr(has_copies):
            copy = module.make_gmem_copy(dtype)
            # Each smem tile viewed over a buffer holding 0, 1, 2, ...: reading it yields offsets.
            sV = module.transpose_view(cute.make_tensor(buffer.iterator, plain(sVt_layout)))
            stores += [(cute.make_tensor(buffer.iterator, plain(sQ_layout)), q_out, copy),
                       (cute.make_tensor(buffer.iterator, plain(sK_layout)), k_out, copy),
                       (sV, v_out, copy)]
        for t in cutlass.range_constexpr(WARP):
            for dst, out, tiled in stores:
                part = module.row_piece(dst, t, 0) if tiled is None else tiled.get_slice(t).partition_D(dst)
                for v in cutlass.range_constexpr(cute.size(out, mode=[1])):
                    out[t, v] = part[v]

    # Elements per thread in one P store: a bf16 pair from an MMA fragment (Hopper), or 16 bytes
    # of the thread's own row (Blackwell, a vectorized store of a row piece).
    p_vec = 8 if hasattr(module, "row_piece") else 2
    cosize = 1 << 16
    buffer = torch.arange(cosize, dtype=torch.int32)
    outs = {name: torch.full((WARP, vec), -1, dtype=torch.int32)
            for name, vec in (("Q", 8), ("K", 8), ("V", 8), ("P", p_vec))}
    element_offsets(from_dlpack(buffer), *(from_dlpack(o) for o in outs.values()))
    outs = {name: out for name, out in outs.items()
            if (name == "P" and found["has_p"]) or (name != "P" and has_copies)}

    layouts = {}

    @cute.jit
    def read_swizzles():
        sQ, sK, sVt, *sP = module.make_smem_layouts()
        layouts.update(Q=swizzle_params(sQ), K=swizzle_params(sK), V=swizzle_params(sVt))
        if cutlass.const_expr(len(sP) == 1):
            layouts.update(P=swizzle_params(sP[0]))

    read_swizzles()
    costs = []
    for name, out in outs.items():
        if (out < 0).any():
            raise RuntimeError(f"{step.id}: offsets for {name} were not all written")
        bms = layouts[name]
        thread_bytes = []
        for row in out.tolist():
            addrs = []
            for elem in row:
                base = swizzle(elem * ELEMENT_BYTES, bms)
                addrs += [base + i for i in range(ELEMENT_BYTES)]
            thread_bytes.append(addrs)
        needed, minimal = wavefronts(thread_bytes)
        costs.append(StoreCost(name, out.shape[1] * ELEMENT_BYTES, needed, minimal))
    return costs

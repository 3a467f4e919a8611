"""Shared-memory wavefronts of a step's thread-issued stores, from its layouts and copies alone.

For each store the kernel issues from threads (the synchronous Q/K/V copies, P's register->smem
store), take warp 0's first store instruction: each thread's first ``vec`` elements, as the step's
own tiled copy assigns them and its own smem layout places them (swizzle included). Shared memory
has 32 banks of 4 bytes and serves one 128-byte wavefront per cycle; a warp instruction needs as
many wavefronts as the most distinct 4-byte words any one bank must deliver, phase by phase
(``wavefronts``). Runs on the CPU: CuTe's layout algebra is evaluated in a host-side ``@cute.jit``
function. ``kernel_stores`` scales one instruction's cost to a whole kernel, for comparison with
ncu's counters (``ladder profile``): exact where the stores have shared memory to themselves
(``stores_alone``), a lower bound where other warps' tensor-core or TMA traffic shares it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass

from harness.core.memo import remembered

BANKS, BANK_BYTES = 32, 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES
ELEMENT_BYTES = 2                     # bf16
WARP = 32
MAX_ELEMENTS_PER_THREAD = 512         # room for the largest per-thread share of a tile
COUNTING = 1 << 16                    # a counting tensor as long as the largest smem tile


@dataclass(frozen=True)
class StoreCost:
    name: str
    bytes_per_thread: int         # per store instruction
    wavefronts: int               # warp 0's first store instruction
    minimal: int
    sampled: tuple[int, ...] = ()  # wavefronts of warp 0's first, second and last store instruction
    instructions: int = 1          # store instructions per warp for one tile (one execution of the store)
    first_addresses: tuple[int, ...] = ()   # byte address each thread of warp 0 writes first

    @property
    def is_minimal(self) -> bool:
        return self.wavefronts == self.minimal

    @property
    def uniform(self) -> bool:
        """The sampled instructions cost alike (true of every step so far): then the first one's
        cost times the instruction count is the tile's."""
        return len(set(self.sampled)) == 1

    @property
    def wavefronts_per_tile(self) -> int:
        """Wavefronts of all of one warp's store instructions for one tile."""
        return self.wavefronts * self.instructions


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
    byte addresses one thread writes (in thread order).

    A warp's access wider than 4 bytes per thread is served in phases of 128 bytes of threads: a
    16-byte access in four quarter-warps (threads 0-7, 8-15, ...), an 8-byte one in two halves.
    Within a phase, each bank delivers one 4-byte word per wavefront, so the phase needs as many
    wavefronts as its busiest bank has distinct words; the phases add up. (Counting the whole
    warp at once instead undercounts a conflicted 16-byte store by up to 4x: two quarter-warps
    that hit different banks do not share a wavefront.)"""
    width = max(len(addrs) for addrs in thread_bytes)
    per_phase = max(1, WAVEFRONT_BYTES // width)          # threads whose bytes fill one wavefront
    needed, touched = 0, set()
    for start in range(0, len(thread_bytes), per_phase):
        words_per_bank: dict[int, set[int]] = {}
        for addrs in thread_bytes[start:start + per_phase]:
            for a in addrs:
                word = a // BANK_BYTES
                words_per_bank.setdefault(word % BANKS, set()).add(word)
                touched.add(a)
        needed += max(len(w) for w in words_per_bank.values())
    return needed, math.ceil(len(touched) / WAVEFRONT_BYTES)


def _leaves(t) -> list:
    return [x for e in t for x in _leaves(e)] if isinstance(t, tuple) else [t]


def static_coordinates(tensor) -> list | None:
    """Every element of a view of a counting tensor (``cute.make_identity_tensor``), in element order
    (the first mode fastest), computed in Python from its static layout: the iterator plus i * stride
    along each mode, a stride being an integer (a 1-D counting tensor: the elements are offsets) or
    ``value@mode`` (a multi-dimensional one: coordinates). None where the view is not of that form;
    then index it element by element inside ``@cute.jit``, a traced operation each (seconds per step)."""
    base = tensor.iterator
    shape, stride = _leaves(tensor.layout.shape), _leaves(tensor.layout.stride)
    if isinstance(base, int) and all(isinstance(x, int) for x in shape + stride):
        out = [base]
        for n, d in zip(shape, stride, strict=True):
            out = [c + i * d for i in range(n) for c in out]
        return out
    if not isinstance(base, tuple) or not all(isinstance(c, int) for c in base + tuple(shape)):
        return None
    out = [base]
    for n, d in zip(shape, stride, strict=True):
        if isinstance(d, int) and d == 0:
            step = (0,) * len(base)                  # a broadcast mode: the same coordinates again
        elif isinstance(d, int) or not isinstance(d.value, int) or len(d.mode) != 1:
            return None
        else:
            step = tuple(d.value if j == d.mode[0] else 0 for j in range(len(base)))
        out = [tuple(c + i * s for c, s in zip(crd, step, strict=True)) for i in range(n) for crd in out]
    return out


_costs: dict[str, list[StoreCost]] = {}


def store_costs(step) -> list[StoreCost]:
    """Warp 0's first store of each thread-issued smem store of ``step`` (Q, K, V copies and P).
    Traced once per step version and build directory (harness/core/memo.py): seconds of tracing each."""
    key = {"file": str(step.path.resolve()), **step.fingerprint}
    name = json.dumps(key, sort_keys=True)
    if name not in _costs:
        found = remembered("store_costs", key, lambda: [dataclasses.asdict(c) for c in _traced_store_costs(step)])
        _costs[name] = [StoreCost(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()}) for c in found]
    return _costs[name]


def _traced_store_costs(step, by_element: bool = False) -> list[StoreCost]:
    import cutlass
    import cutlass.cute as cute
    import torch

    from ladder.contract import set_target_arch
    set_target_arch(step.info.archs[0])                  # MMA atoms check the target arch
    module = step.module
    dtype = cutlass.BFloat16

    has_copies = hasattr(module, "make_gmem_copy")    # from h04 on, TMA writes Q, K and V
    # Elements per store instruction: 16 bytes for the Q/K/V copies; for P a bf16 pair from an MMA
    # fragment (Hopper), or 16 bytes of the thread's own row (Blackwell, a row piece vectorized).
    vec = {"Q": 8, "K": 8, "V": 8, "P": 8 if hasattr(module, "row_piece") else 2}
    found = {}                                         # facts learned while tracing

    def plain(layout):
        """The layout without its swizzle; for a stack of tiles (a ring stage or a second Q
        tile as a third mode), the first tile: every tile is laid out alike."""
        outer = layout.outer if hasattr(layout, "outer") else layout
        return cute.select(outer, mode=[0, 1]) if cute.rank(outer) == 3 else outer

    def smem_stores(view, sQ_layout, sK_layout, sVt_layout, sP_layout, tiled_mma):
        """(name, the smem tile seen through ``view``, the tiled copy that stores it; None for
        Blackwell's P, whose thread t stores its own row t, one piece of columns at a time)."""
        found["has_p"] = len(sP_layout) == 1            # from h06 on, P stays in registers
        stores = []
        if cutlass.const_expr(found["has_p"] and hasattr(module, "row_piece")):
            stores.append(("P", view(plain(sP_layout[0])), None))
        elif cutlass.const_expr(found["has_p"]):
            stores.append(("P", view(plain(sP_layout[0])), module.make_fragment_store(dtype, tiled_mma)))
        if cutlass.const_expr(has_copies):
            copy = module.make_gmem_copy(dtype)
            stores += [("Q", view(plain(sQ_layout)), copy), ("K", view(plain(sK_layout)), copy),
                       ("V", module.transpose_view(view(plain(sVt_layout))), copy)]
        return stores

    # Each smem tile seen over a counting tensor (element i holds i): what a thread's partition holds
    # are the offsets it stores to, read off the partition's static layout in Python
    # (static_coordinates): every element of every thread, in the order its store instructions take
    # them (a partition's first mode is one instruction's vector). ``by_element`` indexes them one
    # by one in a kernel run on the CPU instead (the first, second and last instruction; seconds).
    offsets: dict[str, list] = {}

    @cute.jit
    def static_offsets():
        sQ_layout, sK_layout, sVt_layout, *sP_layout = module.make_smem_layouts()
        tiled_mma, _ = module.make_tiled_mmas(dtype)
        ident = cute.make_identity_tensor(COUNTING)

        def view(layout):
            return cute.make_tensor(ident.iterator, cute.composition(ident.layout, layout))

        for name, dst, tiled in smem_stores(view, sQ_layout, sK_layout, sVt_layout, sP_layout, tiled_mma):
            for t in cutlass.range_constexpr(WARP):
                if cutlass.const_expr(tiled is None):
                    pieces = cute.size(dst, mode=[1]) // cute.size(module.row_piece(dst, 0, 0))
                    parts = [static_coordinates(module.row_piece(dst, t, i)) for i in range(pieces)]
                    row = None if None in parts else [x for part in parts for x in part]
                else:
                    row = static_coordinates(tiled.get_slice(t).partition_D(dst))
                offsets.setdefault(name, []).append(row)

    if not by_element:
        static_offsets()
        if any(None in rows for rows in offsets.values()):
            raise RuntimeError(f"{step.id}: a store's partition has no static layout to read offsets from")
        outs = {name: torch.tensor(offsets[name], dtype=torch.int32) for name in vec if name in offsets}
    else:
        outs = _offsets_by_element(module, dtype, plain, vec, found, smem_stores)

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
        if (out[:, sampled_elements(out.shape[1], vec[name])] < 0).any():
            raise RuntimeError(f"{step.id}: offsets for {name} were not all written")
        bms = layouts[name]
        per_instruction, minimal, first_addresses = [], None, None
        for first in sorted({e - e % vec[name] for e in sampled_elements(out.shape[1], vec[name])}):
            thread_bytes = []
            for row in out[:, first:first + vec[name]].tolist():
                addrs = []
                for elem in row:
                    base = swizzle(elem * ELEMENT_BYTES, bms)
                    addrs += [base + i for i in range(ELEMENT_BYTES)]
                thread_bytes.append(addrs)
            needed, least = wavefronts(thread_bytes)
            per_instruction.append(needed)
            minimal = least if minimal is None else minimal
            first_addresses = first_addresses or tuple(min(addrs) for addrs in thread_bytes)
        costs.append(StoreCost(name, vec[name] * ELEMENT_BYTES, per_instruction[0], minimal, tuple(per_instruction),
                               out.shape[1] // vec[name], first_addresses))
    return costs


def _offsets_by_element(module, dtype, plain, vec, found, smem_stores):
    """The offsets of the first, second and last store instruction of each thread, indexed one by
    one in a host kernel run on the CPU over a buffer holding 0, 1, 2, ...: the slow reading
    (seconds per step) that ``static_coordinates`` replaces, kept to check it."""
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    @cute.jit
    def element_offsets(buffer, q_out, k_out, v_out, p_out):
        sQ_layout, sK_layout, sVt_layout, *sP_layout = module.make_smem_layouts()
        tiled_mma, _ = module.make_tiled_mmas(dtype)
        outs = {"Q": q_out, "K": k_out, "V": v_out, "P": p_out}

        def view(layout):
            return cute.make_tensor(buffer.iterator, layout)

        for name, dst, tiled in smem_stores(view, sQ_layout, sK_layout, sVt_layout, sP_layout, tiled_mma):
            out = outs[name]
            for t in cutlass.range_constexpr(WARP):
                if cutlass.const_expr(tiled is None):
                    piece_cols = cute.size(module.row_piece(dst, 0, 0))
                    found["n_" + name] = cute.size(dst, mode=[1])
                    for e in cutlass.range_constexpr(len(sampled_elements(found["n_" + name], vec[name]))):
                        element = sampled_elements(found["n_" + name], vec[name])[e]
                        part = module.row_piece(dst, t, element // piece_cols)
                        out[t, element] = part[element % piece_cols]
                else:
                    part = tiled.get_slice(t).partition_D(dst)
                    found["n_" + name] = cute.size(part)
                    for e in cutlass.range_constexpr(len(sampled_elements(found["n_" + name], vec[name]))):
                        element = sampled_elements(found["n_" + name], vec[name])[e]
                        out[t, element] = part[element]

    buffer = torch.arange(COUNTING, dtype=torch.int32)
    outs = {name: torch.full((WARP, MAX_ELEMENTS_PER_THREAD), -1, dtype=torch.int32) for name in vec}
    element_offsets(from_dlpack(buffer), *(from_dlpack(o) for o in outs.values()))
    return {name: out[:, :found["n_" + name]] for name, out in outs.items() if "n_" + name in found}


def sampled_elements(elements: int, vec: int) -> list[int]:
    """A thread's element indices of its first, second and last store instruction."""
    instructions = sorted({0, min(1, elements // vec - 1), elements // vec - 1})
    return [i * vec + v for i in instructions for v in range(vec)]


@dataclass(frozen=True)
class KernelStores:
    """A whole kernel's thread-issued smem stores at one shape: warp-level store instructions and
    the wavefronts they need, each instruction counted as if it had shared memory to itself."""
    instructions: int
    wavefronts: int
    minimal: int


def kernel_stores(step, shape) -> KernelStores:
    """Every CTA stores its Q tile once and, per K/V tile, its K, V and P tiles (those the step
    stores from threads); instructions = bytes / (bytes per thread-store x 32)."""
    batch, seqlen, heads, head_dim = shape
    info = step.info
    ctas = batch * heads * (seqlen // info.tile_m)
    tiles = seqlen // info.tile_n
    tile_bytes = {"Q": info.tile_m * head_dim * ELEMENT_BYTES, "K": info.tile_n * head_dim * ELEMENT_BYTES,
                  "V": info.tile_n * head_dim * ELEMENT_BYTES, "P": info.tile_m * info.tile_n * ELEMENT_BYTES}
    per_cta = {"Q": 1, "K": tiles, "V": tiles, "P": tiles}
    instructions = wavefronts_total = minimal = 0
    for cost in store_costs(step):
        n = ctas * per_cta[cost.name] * tile_bytes[cost.name] // (cost.bytes_per_thread * WARP)
        instructions += n
        wavefronts_total += n * cost.wavefronts
        minimal += n * cost.minimal
    return KernelStores(instructions, wavefronts_total, minimal)


ASYNC_SMEM_CLIENTS = ("HGMMA", "UTCHMMA", "UTMALDG")   # tensor cores and TMA read/write smem too


def stores_alone(mechanisms: dict, warps_per_sm: float) -> bool:
    """Whether a step's thread stores have the SM's shared memory to themselves: no tensor-core or
    TMA traffic in the kernel at all, or a single warpgroup per SM (its own MMAs have completed
    before it stores). Otherwise other warps' async traffic lands in the same cycles, and ncu counts
    extra store wavefronts that no bank arithmetic of one instruction predicts."""
    return not any(mechanisms.get(m) for m in ASYNC_SMEM_CLIENTS) or warps_per_sm <= 4.5

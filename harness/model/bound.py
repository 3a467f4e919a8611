"""What bounds a step: the cycles each unit of an SM needs per K/V tile, from the step's own SASS,
combined by the way its roles overlap.

Per CTA and K/V tile (the CTA's tile_m query rows against tile_n keys), on one SM of a GPU whose
per-SM rates are in harness/model/units.py:

- tensor: 2 GEMMs x 2 FLOP x tile_m x tile_n x head_dim / dense FLOP per clock;
- MUFU:   the softmax loop's MUFU instructions x softmax threads / 16 per clock;
- issue:  the softmax loop's instructions x softmax warps / 4 schedulers (the other roles' loops
          are a few instructions per tile and left out);
- smem:   wavefronts (128 bytes per clock): the operand bytes the tensor cores read from shared
          memory (wgmma/tcgen05 SS and RS/TS operands, in swizzled or core-matrix layouts:
          conflict-free; a 2-CTA step's CTA supplies half of each K and V tile), the thread stores harness/model/smem_model.py costs from the step's own layouts,
          and ldmatrix (its bytes times the declared conflict degree);
- L2:     the K and V bytes of the tile (a 2-CTA step's CTA: half) / the L2 rate.

The step's ``INFO.extra["bound"]`` declares how its roles overlap; that turns the unit demands into
a time per tile. With R CTAs resident on the SM, T (cycles for one tile of each resident CTA) is the
larger of the busiest unit's demand over the R CTAs and one CTA's critical path (its chain):

- ``serial``:    one softmax group per CTA; GEMMs, softmax, GEMMs one after the other:
                 chain = tensor + softmax(one warp per scheduler) + exposed load;
- ``lockstep``:  two groups wait on the same barriers, so both run their softmax at once:
                 chain = tensor + softmax(two warps per scheduler) + exposed load;
- ``pingpong``:  two groups take turns at the tensor core (named barriers), each running its
                 softmax while the other's GEMMs run: chain = max(tensor, one group's GEMMs +
                 softmax(one warp per scheduler) + 2 hand-offs);
- ``pipelined``: one MMA thread alternates the two groups' GEMMs (b09 on): the same chain;
- ``overlapped``: the softmax also runs under the group's own next GEMMs (FA4): chain = max(tensor,
                 max(one group's GEMMs, its softmax) + 2 hand-offs).

softmax(w warps per scheduler) is the group's instructions per warp over min(1, w x IPC_ONE_WARP)
issue slots per cycle, and at least its MUFU work. An exposed load costs LOAD_LATENCY plus the
tile's bytes at the L2 rate. These three constants are the model's only free parameters; they are
global (the same for every step and GPU), stated with the reason for their value, never fitted per
step. The predicted fraction of FA4 is FA4's time per FLOP through the same model over the step's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.core.memo import per_step_version
from harness.model import units

IPC_ONE_WARP = 0.5      # a softmax warp's issue rate alone on a scheduler: its FFMA/MUFU/FMNMX chain
                        # has ~2 independent instructions per 4-cycle dependent latency
HANDOFF = 150           # cycles from an mbarrier arrive / commit to the waiting warp running again
LOAD_LATENCY = 800      # cycles before the first bytes of a K/V tile arrive from L2/HBM

STRUCTURES = ("serial", "lockstep", "pingpong", "pipelined", "overlapped")


@dataclass
class Bound:
    step: str
    gpu: str
    structure: str
    ctas_per_sm: int
    flop: float                               # per CTA and K/V tile
    units: dict = field(default_factory=dict)  # unit -> cycles per CTA and tile
    chain: float = 0.0                        # one CTA's critical path per tile
    chain_terms: dict = field(default_factory=dict)
    cycles: float = 0.0                       # per CTA and tile, R CTAs sharing the SM
    binding: str = ""

    @property
    def flop_per_cycle(self) -> float:
        return self.flop / self.cycles


def ctas_per_sm(threads: int, smem_bytes: int, registers: int, gpu: units.Gpu) -> int:
    """Resident CTAs: limited by shared memory (1 KB reserved per CTA), threads and registers
    (allocated per warp in units of 256; a CTA's warps rounded up to a multiple of 4)."""
    by_smem = gpu.smem_per_sm // (smem_bytes + 1024)
    by_threads = gpu.max_threads // threads
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // 256) * 256
    by_regs = gpu.registers // (per_warp * (-(-warps // 4) * 4))
    return max(1, min(by_smem, by_threads, by_regs))


def b_share(step) -> float:
    """The share of every K and V tile a CTA holds and its shared memory supplies: 1, or 1/2 for a
    2-CTA step (INFO.extra["cta_group"] = 2: each CTA of the pair loads and serves half of the
    MMAs' B operand, read once for both tensor cores)."""
    return 1 / step.info.extra.get("cta_group", 1)


def _operand_bytes(step, mechanisms: dict) -> float:
    """Bytes the tensor cores read from shared memory per CTA and K/V tile."""
    tm, tn, d = step.info.tile_m, step.info.tile_n, step.info.head_dim
    if step.track == "hopper":
        rows, groups = 64, tm // 64                      # one wgmma M=64 per warpgroup
        pv_from_smem = not mechanisms.get("HGMMA.RS")
    elif step.track == "blackwell":
        rows, groups = 128, tm // 128                    # one tcgen05.mma M=128 (per CTA) per Q tile
        pv_from_smem = not mechanisms.get("UTCHMMA.TS")
    else:
        return 0.0                                       # mma.sync: operands come through ldmatrix
    share = b_share(step)
    qk = (rows + tn * share) * d * 2
    pv = (rows * tn + tn * d * share) * 2 if pv_from_smem else tn * d * share * 2
    return groups * (qk + pv)


def _ldsm_wavefronts(step, opcodes: dict, threads: int) -> float:
    """ldmatrix wavefronts per CTA and tile: x4 moves 16 bytes per thread (4 minimal wavefronts per
    warp), times the conflict degree the step declares."""
    per_warp = sum(n * {"X4": 4, "X2": 2, "X1": 1}.get(op.split(".")[-1].upper().replace("T", ""), 4)
                   for op, n in opcodes.items() if op.startswith("LDSM"))
    return per_warp * (threads // 32) * step.info.extra["bound"].get("ldsm_conflict", 1)


def _store_wavefronts(step) -> float:
    """Thread stores to shared memory per CTA and tile, as harness/model/smem_model.py costs them."""
    from harness.model import smem_model
    try:
        costs = smem_model.store_costs(step)
    except Exception:                     # no thread-issued stores the model can read (TMA steps)
        return 0.0
    warps = step.info.threads // 32
    return sum(c.wavefronts * c.instructions for c in costs if c.name != "Q") * warps


@per_step_version
def demands(step, gpu_key: str) -> tuple[dict, dict]:
    """(unit -> cycles per CTA and tile, facts used) for a ladder step."""
    from harness.compiler import softmax_budget
    from harness.compiler.compile import compile_step
    gpu = units.gpu(gpu_key)
    arch = gpu.arch if gpu.arch in step.info.archs else step.info.archs[0]
    report = compile_step(step, arch)
    b = softmax_budget.budget(step, arch)
    sm_threads = b["softmax_threads"]
    flop = 4 * step.info.tile_m * step.info.tile_n * step.info.head_dim
    smem = (_operand_bytes(step, report.sass.mechanisms) / gpu.smem.value
            + _store_wavefronts(step) + _ldsm_wavefronts(step, b["opcodes"], step.info.threads))
    mufu_ops = b["counts"]["MUFU.EX2"] + b["counts"].get("MUFU other", 0)
    out = {
        "tensor": flop / gpu.tensor.value,
        "mufu": mufu_ops * sm_threads / gpu.mufu.value,
        "issue": b["total"] * sm_threads / 32 / gpu.schedulers.value,
        "smem": smem,
        "l2": 2 * step.info.tile_n * step.info.head_dim * 2 * b_share(step) / gpu.l2.value,
    }
    facts = {"flop": flop, "softmax_threads": sm_threads, "instructions_per_warp": b["total"],
             "mufu_per_warp": mufu_ops, "registers": report.sass.registers,
             "ctas_per_sm": ctas_per_sm(step.info.threads, step.info.smem_bytes, report.sass.registers, gpu),
             "groups": max(1, step.info.tile_m // (128 if step.track == "blackwell" else 64))
             if step.track else 1, "mufu_rate": gpu.mufu.value}
    return out, facts


def softmax_cycles(instr_per_warp: float, mufu_per_warp: float, warps_per_scheduler: float, mufu_rate: float) -> float:
    """Cycles for a tile of softmax with ``warps_per_scheduler`` of its warps on each scheduler: the
    instructions at the issue rate those warps get, and at least their MUFU work."""
    rate = min(1.0, warps_per_scheduler * IPC_ONE_WARP)
    return max(instr_per_warp * warps_per_scheduler / rate,
               mufu_per_warp * 32 * 4 * warps_per_scheduler / mufu_rate)


def combine(name: str, gpu_key: str, structure: str, loads: str, unit_cycles: dict, facts: dict) -> Bound:
    if structure not in STRUCTURES:
        raise ValueError(f"{name}: unknown overlap structure {structure!r}; known: {', '.join(STRUCTURES)}")
    groups = facts["groups"]
    # Per group: its warps' instructions (one warp per scheduler per group of 4 warps).
    per_warp = facts["instructions_per_warp"]
    mufu = facts["mufu_per_warp"]
    tensor = unit_cycles["tensor"]
    load = LOAD_LATENCY + unit_cycles["l2"] if loads == "exposed" else 0.0
    terms: dict = {}
    if structure == "serial":
        terms = {"tensor": tensor, "softmax": softmax_cycles(per_warp, mufu, 1, facts["mufu_rate"]), "exposed load": load}
        chain = sum(terms.values())
    elif structure == "lockstep":
        terms = {"tensor": tensor, "softmax (both groups)": softmax_cycles(per_warp, mufu, groups, facts["mufu_rate"]),
                 "exposed load": load}
        chain = sum(terms.values())
    elif structure == "pingpong":
        # Each group: its own GEMMs (its turn at the tensor core), then its softmax, with a hand-off
        # at each end; the tensor core serves the groups in turn.
        group = tensor / groups + softmax_cycles(per_warp, mufu, 1, facts["mufu_rate"]) + 2 * HANDOFF
        terms = {"tensor": tensor, "one group's GEMMs + softmax + hand-offs": group}
        chain = max(terms.values()) + load
    elif structure == "pipelined":
        # One MMA thread alternates the groups' GEMMs; a group's tile is its S, its softmax, its P V.
        group = tensor / groups + softmax_cycles(per_warp, mufu, 1, facts["mufu_rate"]) + 2 * HANDOFF
        terms = {"tensor": tensor, "one group's GEMMs + softmax + hand-offs": group}
        chain = max(terms.values()) + load
    else:   # overlapped: the softmax runs while the group's own next GEMMs are in flight
        group = max(tensor / groups, softmax_cycles(per_warp, mufu, 1, facts["mufu_rate"])) + 2 * HANDOFF
        terms = {"tensor": tensor, "one group's max(GEMMs, softmax) + hand-offs": group}
        chain = max(terms.values()) + load
    r = facts["ctas_per_sm"]
    busiest = max(unit_cycles, key=unit_cycles.get)
    per_cta = max(chain / r, unit_cycles[busiest])
    if structure in ("serial", "lockstep"):       # the chain is a sum: name its parts
        path = " + ".join(name for name, cyc in terms.items() if cyc)
    else:                                         # the chain is a max: name the longer
        path = max(terms, key=terms.get)
    binding = busiest if unit_cycles[busiest] >= chain / r else "chain: " + path
    return Bound(name, gpu_key, structure, r, facts["flop"], dict(unit_cycles), chain, terms, per_cta, binding)


def bound(step, gpu_key: str = "h200") -> Bound:
    decl = step.info.extra.get("bound")
    if not decl:
        raise ValueError(f"{step.id} declares no overlap structure (INFO.extra['bound'])")
    unit_cycles, facts = demands(step, gpu_key)
    return combine(step.id, gpu_key, decl["overlap"], decl["loads"], unit_cycles, facts)


def fraction_of(step_bound: Bound, reference: Bound) -> float:
    """The step's predicted speed as a fraction of the reference's (FLOP per cycle ratio)."""
    return step_bound.flop_per_cycle / reference.flop_per_cycle


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation (ties get their mean rank)."""
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy)


# FA4's forward kernels, through the same model: their overlap structure, as their source has it.
FA4_STRUCTURE = {
    "sm_90a": "overlapped",    # flash_fwd_sm90.py: ping-pong + intra-warpgroup overlap (QK(j+1), PV(j) in flight)
    "sm_100a": "pipelined",    # flash_fwd_sm100.py: one MMA warp alternates the two Q tiles, as b09
}


def fa4_bound(gpu_key: str = "h200") -> Bound:
    """FA4's forward kernel for the ladder's workload, compiled on this machine for the GPU's
    architecture (harness/compiler/fa4_sass.py), through the same model."""
    from harness.compiler import fa4_sass
    gpu = units.gpu(gpu_key)
    b = fa4_sass.fa4_budget(gpu.arch)
    meta = b["fa4"]
    tm, tn, d = b["tile_m"], b["tile_n"], b["head_dim"]
    flop = 4 * tm * tn * d
    threads = b["softmax_threads"]
    mufu_ops = b["counts"]["MUFU.EX2"] + b["counts"].get("MUFU other", 0)
    if gpu.arch == "sm_90a":
        rows, groups = 64, tm // 64
        b_share = 1.0
    else:
        rows, groups = 128, meta["q_stage"]
        b_share = 0.5 if meta["two_cta"] else 1.0     # 2-CTA: each CTA holds and reads half of K and V
    operand = groups * ((rows + tn * b_share) * d * 2 + tn * b_share * d * 2)   # QK (SS) + PV (RS / TS)
    unit_cycles = {
        "tensor": flop / gpu.tensor.value,
        "mufu": mufu_ops * threads / gpu.mufu.value,
        "issue": b["total"] * threads / 32 / gpu.schedulers.value,
        "smem": operand / gpu.smem.value,
        "l2": 2 * tn * d * 2 * b_share / gpu.l2.value,
    }
    facts = {"flop": flop, "softmax_threads": threads, "instructions_per_warp": b["total"],
             "mufu_per_warp": mufu_ops, "registers": meta["registers"], "ctas_per_sm": 1, "groups": groups,
             "mufu_rate": gpu.mufu.value}
    return combine("FA4", gpu_key, FA4_STRUCTURE[gpu.arch], "hidden", unit_cycles, facts)

"""The register file after setmaxnreg, read from the PTX and the step's role table.

``setmaxnreg`` changes the registers of every thread of a *warpgroup* (four consecutive warps),
and the warpgroups of a CTA share one SM's 65,536 registers. So a split is right only when (1) the
four warps of each warpgroup ask for the same count, (2) every count the PTX sets is one the role
table gives some warpgroup, and every role's count is set in the PTX, in the right direction (dec
below the launch count, inc above it), and (3) the counts, 128 threads each, fit the register
file. A split that breaks (3) hangs the kernel at the setmaxnreg.inc that waits for registers
nobody frees; one that breaks (1) is undefined behaviour.
"""

from __future__ import annotations

import re

REGISTER_FILE = 65536          # 32-bit registers per SM (sm_90, sm_100)
WARPGROUP_WARPS = 4
WARPGROUP_THREADS = 128

_SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);")


class RegisterBudgetError(ValueError):
    pass


def ptx_setmaxnreg(ptx: str) -> list[tuple[str, int]]:
    """Every setmaxnreg of the PTX: ("inc" or "dec", registers per thread)."""
    return [(d, int(n)) for d, n in _SETMAXNREG.findall(ptx)]


def launch_registers(threads: int) -> int:
    """Registers per thread at launch when ptxas fixes them so the whole file is used (a multiple
    of 8): what setmaxnreg raises or lowers from."""
    return REGISTER_FILE // threads // 8 * 8


def per_warp(step) -> list[int]:
    """Registers each warp of the CTA asks for after the split, from the step's own constants:
    Hopper's PRODUCER_REGISTERS (warpgroup 0) and CONSUMER_REGISTERS (the rest); Blackwell's
    INFO.extra["registers"] by role (softmax, correction, other) over INFO.extra["warp_roles"]."""
    m, extra = step.module, step.info.extra
    warps = step.info.threads // 32
    if "registers" in extra:
        regs = extra["registers"]
        role_of = {w: role for role, ws in extra["warp_roles"].items() for w in ws}
        key = lambda role: next((k for k in ("softmax", "correction") if role.startswith(k)), "other")  # noqa: E731
        return [regs[key(role_of.get(w, "other"))] for w in range(warps)]
    if hasattr(m, "PRODUCER_REGISTERS"):
        return [m.PRODUCER_REGISTERS if w < WARPGROUP_WARPS else m.CONSUMER_REGISTERS for w in range(warps)]
    raise RegisterBudgetError(f"{step.id} names no register split")


def check(warp_registers: list[int], ptx: list[tuple[str, int]], threads: int) -> dict:
    """The split's three rules (module docstring); returns the per-warpgroup counts and their total."""
    if len(warp_registers) % WARPGROUP_WARPS:
        raise RegisterBudgetError(f"{len(warp_registers)} warps are not whole warpgroups")
    groups = [warp_registers[i:i + WARPGROUP_WARPS] for i in range(0, len(warp_registers), WARPGROUP_WARPS)]
    for g, regs in enumerate(groups):
        if len(set(regs)) != 1:
            raise RegisterBudgetError(f"warpgroup {g}'s warps ask for different counts {regs}: setmaxnreg acts "
                                      "on a whole warpgroup")
    counts = [regs[0] for regs in groups]
    for n in counts:
        if n % 8 or not 24 <= n <= 256:
            raise RegisterBudgetError(f"{n} registers: setmaxnreg takes a multiple of 8 in 24..256")
    start = launch_registers(threads)
    wanted = {("dec" if n < start else "inc", n) for n in counts if n != start}
    if set(ptx) != wanted:
        raise RegisterBudgetError(f"the PTX sets {sorted(set(ptx))}, the role table wants {sorted(wanted)} "
                                  f"(from {start} at launch)")
    total = sum(n * WARPGROUP_THREADS for n in counts)
    if total > REGISTER_FILE:
        raise RegisterBudgetError(f"the warpgroups' {counts} registers x 128 threads = {total:,} > "
                                  f"{REGISTER_FILE:,}: a setmaxnreg.inc would wait forever")
    return {"warpgroups": counts, "total": total, "file": REGISTER_FILE, "launch": start}


def for_step(step, ptx: str) -> dict:
    return check(per_warp(step), ptx_setmaxnreg(ptx), step.info.threads)

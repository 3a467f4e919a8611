"""An audit of a cluster kernel's PTX: what a pair of CTAs must get right that one CTA never meets.

Any cluster: the mbarriers are initialised, the inits fenced for the cluster
(``fence.mbarrier_init.release.cluster``) and a cluster barrier taken (arrive, then wait) before
anything reaches another CTA: a remote arrive (``mapa``), a multicast or 2-CTA TMA load, a 2-CTA
TMEM allocation. A 2-CTA MMA kernel (Blackwell's ``cta_group::2``) besides: every tcgen05 alloc,
dealloc, relinquish, mma and commit names ``cta_group::2`` (the PTX ISA forbids mixing the two in
one kernel), every commit is multicast to the pair, and every TMA load's mbarrier address has the
peer bit (bit 24 of a shared::cluster address) cleared, so both CTAs' bytes count on the leader's
barrier. Each rule returns a sentence when broken; an empty list is a clean kernel.
"""

from __future__ import annotations

import re

PEER_BIT = 1 << 24
_TCGEN05_OPS = ("alloc", "dealloc", "relinquish_alloc_permit", "mma", "commit")
_REMOTE = {"mapa": r"\bmapa\.", "a multicast TMA load": r"cp\.async\.bulk\.tensor\.\S*\.multicast::cluster",
           "a 2-CTA TMA load": r"cp\.async\.bulk\.tensor\.\S*cta_group::2", "a 2-CTA TMEM allocation":
           r"tcgen05\.alloc\.cta_group::2"}


def _first(pattern: str, ptx: str) -> int | None:
    m = re.search(pattern, ptx)
    return m.start() if m else None


def _line(ptx: str, pos: int) -> int:
    return ptx.count("\n", 0, pos) + 1


def cluster_setup(ptx: str) -> list[str]:
    """mbarrier.init -> fence.mbarrier_init -> cluster arrive -> cluster wait, before any remote traffic."""
    order = [("mbarrier.init", r"mbarrier\.init"), ("fence.mbarrier_init", r"fence\.mbarrier_init\.release\.cluster"),
             ("barrier.cluster.arrive", r"barrier\.cluster\.arrive"), ("barrier.cluster.wait", r"barrier\.cluster\.wait")]
    found = [(name, _first(p, ptx)) for name, p in order]
    missing = [name for name, pos in found if pos is None]
    if missing:
        return [f"no {', '.join(missing)}: a cluster kernel's barriers are not set up for the pair"]
    problems = [f"{a} (line {_line(ptx, pa)}) comes after {b} (line {_line(ptx, pb)})"
                for (a, pa), (b, pb) in zip(found, found[1:], strict=False) if pa > pb]
    wait = found[-1][1]
    for what, pattern in _REMOTE.items():
        pos = _first(pattern, ptx)
        if pos is not None and pos < wait:
            problems.append(f"{what} at line {_line(ptx, pos)} before the cluster barrier's wait (line "
                            f"{_line(ptx, wait)}): the other CTA's barriers may not be initialised yet")
    return problems


def two_cta(ptx: str) -> list[str]:
    """The cta_group::2 rules of a 2-CTA MMA kernel."""
    problems = []
    if "cta_group::1" in ptx:
        problems.append(f"a cta_group::1 instruction at line {_line(ptx, ptx.index('cta_group::1'))}: "
                        "one kernel must not mix cta_group::1 and ::2")
    for op in _TCGEN05_OPS:
        forms = re.findall(rf"tcgen05\.{op}\.(\S+)", ptx)
        if not forms:
            problems.append(f"no tcgen05.{op}")
        elif not all(f.startswith("cta_group::2") for f in forms):
            problems.append(f"tcgen05.{op} not all cta_group::2: {sorted(set(forms))}")
    single = [c for c in re.findall(r"tcgen05\.commit\S+", ptx) if ".multicast::cluster" not in c]
    if single:
        problems.append(f"{len(single)} tcgen05.commit not multicast to the pair: {single[0]}")
    loads = re.findall(r"(cp\.async\.bulk\.tensor\.\S+) \[[^\]]+\], \[[^\]]+\], \[(%r\d+)\]", ptx)
    for form, reg in loads:
        if "cta_group::2" not in form:
            problems.append(f"a TMA load that is not cta_group::2: {form}")
        masks = re.findall(rf"and\.b32\s+{re.escape(reg)}, %r\d+, (-?\d+);", ptx)
        if len(masks) != 1 or int(masks[0]) & PEER_BIT:
            problems.append(f"the mbarrier address {reg} of a TMA load does not clear the peer bit "
                            f"(masks found: {masks})")
    if not loads:
        problems.append("no TMA load reads an mbarrier address from a register")
    return problems


def audit(ptx: str, *, two_cta_mma: bool) -> list[str]:
    return cluster_setup(ptx) + (two_cta(ptx) if two_cta_mma else [])

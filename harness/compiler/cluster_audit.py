"""An audit of a cluster kernel's PTX: what a pair of CTAs must get right that one CTA never meets.

Any cluster kernel. Set-up (``cluster_setup``): every ``mbarrier.init`` comes before the
``fence.mbarrier_init.release.cluster``, and the fence before a cluster barrier (arrive, then wait)
that is passed before the FIRST remote operation: until then the other CTA's barriers may not be
initialised. Exit (``cluster_exit``): after the LAST remote operation the pair synchronises again,
so that no CTA exits (its shared memory gone) while its peer may still signal or read it: either a
cluster barrier (arrive, then wait; the arrive not ``.relaxed``, so that it releases the remote
operations before it), or the shape of the mbarrier handshake b13/b14 end with (``_handshake``): a
CTA barrier after every other remote op, then the last remote op, an arrive through a ``mapa`` of a
local barrier's address, then a wait on that local barrier. No ``ret``/``exit`` comes before that
synchronisation. The handshake is read as instruction order only: which CTA the ``mapa`` names (the
peer, not this CTA), the arrive's scope and semantics, the wait's parity, that the peer's arrive is
the one that completes the wait, and that every barrier is drained (no commit, copy or remote arrive
still in flight) at exit are not checked here; the barrier-protocol model checks those on the
kernel's source (harness/model/protocol.py: the replay pairs each remote arrive with the peer's
wait and fails on an asynchronous arrive not waited for before its CTA exits).
Remote operations (``REMOTE``): ``mapa``, remote mbarrier arrives, ``ld``/``st``/``red``/``atom``
on ``.shared::cluster``, DSMEM bulk copies (``cp[.reduce].async.bulk.shared::cluster.shared::cta``),
multicast bulk copies and commits, 2-CTA TMA loads, MMAs and the 2-CTA TMEM allocation.

A 2-CTA MMA kernel (Blackwell's ``cta_group::2``, ``two_cta``) besides: every tcgen05 alloc,
dealloc, relinquish, mma and commit names ``cta_group::2``, and every TMA load is 2-CTA with its
mbarrier address's peer bit (bit 24 of a shared::cluster address) cleared, so both CTAs' bytes
count on the leader's barrier. Two of these rules are the ladder's conventions, not PTX rules as
stated: "no tcgen05 instruction names cta_group::1" (read on tcgen05 instructions only, where
recent ptxas refuses a kernel mixing the two, llvm/llvm-project#162597; a TMA load's cta_group is
its own qualifier) and "every tcgen05.commit is multicast to the pair" (a commit to one CTA is legal
PTX; the ladder's pairs wait on both CTAs' barriers). Each rule returns a sentence when broken; an
empty list is a clean kernel.
"""

from __future__ import annotations

import re

PEER_BIT = 1 << 24
_TCGEN05_OPS = ("alloc", "dealloc", "relinquish_alloc_permit", "mma", "commit")
_OP = r"(?m)^\s*(?:@!?%p\d+\s+)?"       # an instruction's start, predicated or not
REMOTE = {"mapa": r"\bmapa\.", "a remote mbarrier arrive": r"\bmbarrier\.arrive\S*\.shared::cluster\b",
          "a shared::cluster access": _OP + r"(?:ld|st|red|atom)\.(?:[\w:]+\.)*?shared::cluster\b",
          "a DSMEM bulk copy": r"\bcp(?:\.reduce)?\.async\.bulk\.shared::cluster\.shared::cta\b",
          "a multicast bulk copy": r"\bcp\.async\.bulk\.\S*\.multicast::cluster",
          "a 2-CTA TMA load": r"\bcp\.async\.bulk\.tensor\.\S*cta_group::2",
          "a multicast commit": r"\btcgen05\.commit\.\S*\.multicast::cluster",
          "a 2-CTA MMA": r"\btcgen05\.mma\.cta_group::2", "a 2-CTA TMEM allocation": r"\btcgen05\.alloc\.cta_group::2"}
_INIT, _FENCE = r"\bmbarrier\.init\b", r"\bfence\.mbarrier_init\.release\.cluster\b"
_ARRIVE, _WAIT = r"\bbarrier\.cluster\.arrive\b", r"\bbarrier\.cluster\.wait\b"
_CTA_BARRIER, _RET = r"\b(?:bar|barrier)\.sync(?:\.aligned)?\s+0;", _OP + r"(?:ret|exit);"


def _all(pattern: str, ptx: str) -> list[int]:
    return [m.start() for m in re.finditer(pattern, ptx)]


def _line(ptx: str, pos: int) -> int:
    return ptx.count("\n", 0, pos) + 1


def remote_ops(ptx: str) -> list[tuple[int, str]]:
    """(offset, what) of every remote operation, in text order."""
    return sorted((pos, what) for what, pattern in REMOTE.items() for pos in _all(pattern, ptx))


def cluster_setup(ptx: str) -> list[str]:
    """every mbarrier.init -> fence.mbarrier_init -> cluster arrive -> cluster wait -> the first remote op."""
    found = {name: _all(p, ptx) for name, p in (("mbarrier.init", _INIT), ("fence.mbarrier_init", _FENCE),
                                                ("barrier.cluster.arrive", _ARRIVE), ("barrier.cluster.wait", _WAIT))}
    missing = [name for name, at in found.items() if not at]
    if missing:
        return [f"no {', '.join(missing)}: a cluster kernel's barriers are not set up for the pair"]
    remote = remote_ops(ptx)
    first, what = remote[0] if remote else (len(ptx), "the end")
    waits = [w for w in found["barrier.cluster.wait"] if w < first]
    if not waits:
        return [f"{what} at line {_line(ptx, first)} before the cluster barrier's wait: the other CTA's barriers "
                "may not be initialised yet"]
    wait = waits[-1]                  # the set-up's wait: the last one before the first remote op
    arrives = [a for a in found["barrier.cluster.arrive"] if a < wait]
    fences = [f for f in found["fence.mbarrier_init"] if f < wait]
    if not arrives or not fences:
        return [f"no {'barrier.cluster.arrive' if fences else 'fence.mbarrier_init'} before the cluster barrier's "
                f"wait (line {_line(ptx, wait)}) that precedes the first remote op ({what}, line {_line(ptx, first)})"]
    fence, arrive = fences[-1], arrives[-1]
    problems = [f"barrier.cluster.arrive (line {_line(ptx, arrive)}) comes before the fence.mbarrier_init (line "
                f"{_line(ptx, fence)})"] if arrive < fence else []
    return problems + [f"mbarrier.init (line {_line(ptx, i)}) comes after the fence.mbarrier_init (line "
                       f"{_line(ptx, fence)}) that the cluster barrier publishes" for i in found["mbarrier.init"]
                       if i > fence]


def _handshake(ptx: str, remote: list[tuple[int, str]]) -> int | None:
    """Where the pair's exit handshake waits, or None. Read as text order only: the last remote op is
    an arrive (``mbarrier.arrive...shared::cluster``, any semantics and scope) through a register %rR
    that a ``mapa %rR, %rL, <rank>`` set from a local barrier's address %rL (the rank, a register, not
    read: it may name this CTA itself), a CTA barrier comes after every other remote op and before
    that ``mapa``, and a wait on %rL (any parity) follows the arrive. That the peer's arrive completes
    that wait and that the pair's barriers are drained before exit is the protocol model's check
    (module docstring), not this one's."""
    last, what = remote[-1]
    arrive = re.compile(r"mbarrier\.arrive\S*\.shared::cluster\.b64\s+\S+,\s*\[(%r\d+)\]").match(ptx, last)
    if what != "a remote mbarrier arrive" or not arrive:
        return None
    mapas = [m for m in re.finditer(rf"mapa\.\S+\s+{re.escape(arrive.group(1))},\s*(%r\d+),", ptx) if m.start() < last]
    if not mapas:
        return None
    before = [pos for pos, _ in remote if pos < mapas[-1].start()]
    if before and not any(before[-1] < b < mapas[-1].start() for b in _all(_CTA_BARRIER, ptx)):
        return None
    local = re.escape(mapas[-1].group(1))
    waits = [w for w in _all(rf"mbarrier\.(?:try_wait|test_wait|wait)\S*\s+(?:\S+,\s*)?\[{local}\]", ptx) if w > last]
    return waits[0] if waits else None


def cluster_exit(ptx: str) -> list[str]:
    """A cluster barrier (arrive, then wait) or the shape of the pair's handshake (``_handshake``: order
    only, not its target rank, scope or draining) after the last remote op, and no ret/exit before it."""
    remote = remote_ops(ptx)
    if not remote:
        return []
    last, what = remote[-1]
    arrives = [a for a in _all(_ARRIVE, ptx) if a > last]
    waits = [w for w in _all(_WAIT, ptx) if arrives and w > arrives[0]]
    done = waits[0] if waits else _handshake(ptx, remote)
    if done is None:
        return [f"no cluster barrier (arrive, then wait) nor the pair's mbarrier handshake (CTA barrier, arrive "
                f"through mapa, wait on the local barrier) after the last remote op "
                f"({what}, line {_line(ptx, last)}): a CTA may exit while its peer still signals it"]
    problems = []
    if waits and ptx.startswith("barrier.cluster.arrive.relaxed", arrives[0]):
        problems.append(f"the exit's barrier.cluster.arrive (line {_line(ptx, arrives[0])}) is .relaxed: the remote "
                        "ops before it are not ordered before the peer passes the wait")
    return problems + [f"a ret/exit at line {_line(ptx, r)} before the exit's synchronisation (line "
                       f"{_line(ptx, done)}): that CTA may exit while its peer still signals it"
                       for r in _all(_RET, ptx) if r < done]


def two_cta(ptx: str) -> list[str]:
    """The cta_group::2 rules of a 2-CTA MMA kernel (two of them the ladder's conventions: module docstring)."""
    problems = []
    single = re.search(r"\btcgen05\.\S*cta_group::1\b", ptx)
    if single:
        problems.append(f"a tcgen05 cta_group::1 instruction at line {_line(ptx, single.start())}: one kernel must "
                        "not mix cta_group::1 and ::2")
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
    return cluster_setup(ptx) + cluster_exit(ptx) + (two_cta(ptx) if two_cta_mma else [])

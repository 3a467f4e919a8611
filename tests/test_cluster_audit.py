"""The cluster kernels' PTX and launch, audited (harness/compiler/cluster_audit.py): b13 and b14 (a
2-CTA MMA) and exp:h14-cluster-multicast (a Hopper cluster with multicast K/V, run on the H200)
initialise every barrier before the fence, fence before the cluster barrier that precedes the first
remote operation, and synchronise the pair again after the last one (a cluster barrier, or b13/b14's
mbarrier handshake) before any CTA exits; b13/b14 issue only cta_group::2 tcgen05 instructions,
multicast every commit and clear the peer bit of every TMA load's barrier. Each rule is shown
failing on a broken copy of a real PTX."""

import re

import pytest

from harness.compiler import cluster_audit
from harness.compiler.compile import compile_step, launch_facts
from harness.compiler.smem_budget import shared_storage_bytes
from harness.core.steps import resolve

CLUSTER_STEPS = [("b13", "sm_100a", True), ("b14", "sm_100a", True), ("exp:h14-cluster-multicast", "sm_90a", False)]
SMEM_PER_CTA = 227 * 1024       # the most dynamic shared memory one CTA may have (sm_90, sm_100)


def _ptx(sid, arch):
    return compile_step(resolve(sid), arch).ptx.read_text()


@pytest.mark.parametrize("sid, arch, two_cta", CLUSTER_STEPS, ids=[c[0] for c in CLUSTER_STEPS])
def test_cluster_kernels_pass_the_audit_and_launch_as_pairs(sid, arch, two_cta):
    assert cluster_audit.audit(_ptx(sid, arch), two_cta_mma=two_cta) == []
    step = resolve(sid)
    facts = launch_facts(step, arch)
    assert facts["cluster_launch"] and facts["exact_cluster_dim"] == (2, 1, 1)
    assert facts["exact_block_dim"] == (step.info.threads, 1, 1)
    assert shared_storage_bytes(step) <= SMEM_PER_CTA


def _first_replaced(text, old, new):
    assert old in text
    return text.replace(old, new, 1)


def _peer_bit_kept(ptx):
    """The first TMA load's barrier mask with bit 24 set again (the peer's barrier, not the leader's)."""
    reg = re.search(r"cp\.async\.bulk\.tensor\.\S+ \[[^\]]+\], \[[^\]]+\], \[(%r\d+)\]", ptx).group(1)
    return re.sub(rf"(and\.b32\s+{re.escape(reg)}, %r\d+, )(-?\d+);", lambda m: f"{m.group(1)}-1;", ptx, count=1)


def _mapa_before_the_cluster_barrier(ptx):
    first_init = re.search(r"\tmbarrier\.init[^\n]*\n", ptx)
    return ptx[:first_init.end()] + "\tmapa.shared::cluster.u32 %r0, %r0, 1;\n" + ptx[first_init.end():]


def _cluster_arrive_first(ptx):
    """The cluster barrier's arrive moved ahead of the first mbarrier.init."""
    ptx = _first_replaced(ptx, "barrier.cluster.arrive.relaxed;", "")
    return _first_replaced(ptx, "\tmbarrier.init", "\tbarrier.cluster.arrive.relaxed;\n\tmbarrier.init")


def _after(ptx, pattern, line, last=False):
    """``line`` inserted after the first (or ``last``) line matching ``pattern``."""
    at = list(re.finditer(rf"[^\n]*{pattern}[^\n]*\n", ptx))[-1 if last else 0].end()
    return ptx[:at] + f"\t{line}\n" + ptx[at:]


def _edited_last(ptx, old, new):
    at = ptx.rindex(old)
    return ptx[:at] + new + ptx[at + len(old):]


def _without(ptx, pattern, last=False):
    """The first (or ``last``) line matching ``pattern`` removed."""
    found = list(re.finditer(rf"[^\n]*{pattern}[^\n]*\n", ptx))
    m = found[-1 if last else 0]
    return ptx[:m.start()] + ptx[m.end():]


H14X = "exp:h14-cluster-multicast"
BROKEN = {
    "an MMA on one CTA": ("b13", lambda p: _first_replaced(p, "tcgen05.mma.cta_group::2", "tcgen05.mma.cta_group::1"),
                          "must not mix"),
    "a commit to the leader only": ("b14", lambda p: _first_replaced(p, ".multicast::cluster.b64", ".b64"),
                                    "not multicast to the pair"),
    "a TMA load on the peer's barrier": ("b13", _peer_bit_kept, "does not clear the peer bit"),
    "a remote arrive before the cluster barrier": ("b14", _mapa_before_the_cluster_barrier,
                                                   "mapa at line .* before the cluster barrier"),
    "no fence after the inits": (H14X, lambda p: _first_replaced(p, "fence.mbarrier_init.release.cluster;", ""),
                                 "no fence.mbarrier_init"),
    "the cluster barrier before the inits": (H14X, _cluster_arrive_first, "comes before the fence"),
    # The checks of every occurrence, not only the first:
    "an mbarrier.init after the cluster barrier": (
        H14X, lambda p: _after(p, r"barrier\.cluster\.wait;", "mbarrier.init.shared.b64 [%r1], 1;"),
        r"mbarrier\.init \(line \d+\) comes after the fence"),
    "no cluster barrier at exit": (
        H14X, lambda p: _without(_without(p, r"barrier\.cluster\.wait;", last=True), r"barrier\.cluster\.arrive;",
                                 last=True), "no cluster barrier .* after the last remote op"),
    "a remote arrive after the exit cluster barrier": (
        H14X, lambda p: _after(p, r"barrier\.cluster\.wait;", "mbarrier.arrive.shared::cluster.b64 _, [%r1], 1;",
                               last=True), "no cluster barrier .* after the last remote op"),
    "a relaxed arrive at the exit cluster barrier": (
        H14X, lambda p: _edited_last(p, "barrier.cluster.arrive;", "barrier.cluster.arrive.relaxed;"),
        r"the exit's barrier\.cluster\.arrive \(line \d+\) is \.relaxed"),
    "a ret before the exit cluster barrier": (
        H14X, lambda p: _after(p, r"barrier\.cluster\.wait;", "ret;"), "a ret/exit at line .* before the exit"),
    "no wait in b13's exit handshake": (
        "b13", lambda p: _without(p, r"mbarrier\.try_wait", last=True), "nor the pair's mbarrier handshake"),
    "no CTA barrier before b13's exit handshake": (
        "b13", lambda p: _without(p, r"bar\.sync\s+0;", last=True), "nor the pair's mbarrier handshake"),
}

# The remote operations the audit now recognises besides mapa, multicast/2-CTA TMA and TMEM allocation.
SHARED_CLUSTER = {
    "ld": "ld.shared::cluster.u32 %r0, [%r1];", "st": "st.shared::cluster.u32 [%r1], %r0;",
    "predicated st": "@%p1 st.shared::cluster.u32 [%r1], %r0;",
    "st.async": "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r1], %r0, [%r10];",
    "red": "red.relaxed.cluster.shared::cluster.add.u32 [%r1], 1;",
    "atom": "atom.relaxed.cluster.shared::cluster.add.u32 %r0, [%r1], 1;",
    "DSMEM bulk copy": "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes "
                       "[%r1], [%r2], 16, [%r10];",
    "DSMEM bulk reduce": "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 "
                         "[%r1], [%r2], 16, [%r10];"}


@pytest.mark.parametrize("op", sorted(SHARED_CLUSTER))
def test_each_remote_access_counts_before_the_setup_and_after_the_exit(op):
    ptx, line = _ptx(H14X, "sm_90a"), SHARED_CLUSTER[op]
    assert cluster_audit.audit(ptx, two_cta_mma=False) == []
    kind = "a DSMEM bulk copy" if op.startswith("DSMEM") else "a shared::cluster access"
    early = cluster_audit.cluster_setup(_after(ptx, r"\tmbarrier\.init", line))
    assert any(re.match(rf"{kind} at line \d+ before the cluster barrier's wait", p) for p in early), early
    late = cluster_audit.cluster_exit(_after(ptx, r"barrier\.cluster\.wait;", line, last=True))
    assert any(f"after the last remote op ({kind}, line" in p for p in late), late


def test_cta_group_1_is_read_on_tcgen05_instructions_only():
    """The mixing rule reads tcgen05 instructions: cta_group::1 elsewhere (a comment here) is not one."""
    ptx = _ptx("b13", "sm_100a") + "\n// cta_group::1\n"
    assert cluster_audit.audit(ptx, two_cta_mma=True) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_cluster_kernel_is_caught(case):
    sid, breaks, message = BROKEN[case]
    arch, two_cta = next((a, t) for s, a, t in CLUSTER_STEPS if s == sid)
    problems = cluster_audit.audit(breaks(_ptx(sid, arch)), two_cta_mma=two_cta)
    assert any(re.search(message, p) for p in problems), problems


def test_a_kernel_without_a_cluster_fails_the_cluster_setup():
    assert cluster_audit.cluster_setup(_ptx("h14", "sm_90a"))

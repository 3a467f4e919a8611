"""The cluster kernels' PTX and launch, audited (harness/compiler/cluster_audit.py): b13 and b14 (a
2-CTA MMA) and exp:h14-cluster-multicast (a Hopper cluster with multicast K/V, run on the H200)
set their barriers up for the pair before any remote traffic; b13/b14 issue only cta_group::2
tcgen05 instructions, multicast every commit and clear the peer bit of every TMA load's barrier.
Each rule is shown failing on a broken copy of a real PTX."""

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


BROKEN = {
    "an MMA on one CTA": ("b13", lambda p: _first_replaced(p, "tcgen05.mma.cta_group::2", "tcgen05.mma.cta_group::1"),
                          "must not mix"),
    "a commit to the leader only": ("b14", lambda p: _first_replaced(p, ".multicast::cluster.b64", ".b64"),
                                    "not multicast to the pair"),
    "a TMA load on the peer's barrier": ("b13", _peer_bit_kept, "does not clear the peer bit"),
    "a remote arrive before the cluster barrier": ("b14", _mapa_before_the_cluster_barrier,
                                                   "mapa at line .* before the cluster barrier"),
    "no fence after the inits": ("exp:h14-cluster-multicast",
                                 lambda p: _first_replaced(p, "fence.mbarrier_init.release.cluster;", ""),
                                 "no fence.mbarrier_init"),
    "the cluster barrier before the inits": ("exp:h14-cluster-multicast", _cluster_arrive_first, "comes after"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_cluster_kernel_is_caught(case):
    sid, breaks, message = BROKEN[case]
    arch, two_cta = next((a, t) for s, a, t in CLUSTER_STEPS if s == sid)
    problems = cluster_audit.audit(breaks(_ptx(sid, arch)), two_cta_mma=two_cta)
    assert any(re.search(message, p) for p in problems), problems


def test_a_kernel_without_a_cluster_fails_the_cluster_setup():
    assert cluster_audit.cluster_setup(_ptx("h14", "sm_90a"))

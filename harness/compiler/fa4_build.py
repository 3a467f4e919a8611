"""The child side of harness/compiler/fa4_sass.py: FA4's forward kernel object built as
``flash_attn_func`` builds it, checked against the interface's own choice, and compiled for the ladder's
workload with fake tensors. Runs in its own process (``python -m harness.compiler.fa4_build build ARCH
DIR``): importing flash_attn patches CuTe's tensor classes process-wide; the build replaces
``cutlass.utils.HardwareInfo``. The parent (fa4_sass.py) reads what this writes into DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from harness.compiler.fa4_sass import EX2_EMU_RES, SM_COUNT, WORKLOAD, ex2_emulated, versions
from reference.stock import config_of_key, fa4_compile_keys


def _kernel(arch: str, two_cta: bool | None):
    """FA4's forward kernel object for the workload, built as ``_flash_attn_fwd`` builds it, and
    the notes on each choice. FA4's own ``_get_fwd_config`` gives tiles, Q stages and splits."""
    import math

    import cutlass
    from flash_attn.cute import interface, utils

    w = WORKLOAD
    d, nheads, seqlen, batch = w["head_dim"], w["heads"], w["seqlen"], w["batch"]
    arch_num = interface._parse_arch_str(arch)
    cfg = interface._get_fwd_config(
        arch=arch_num, head_dim=d, head_dim_v=d, max_seqlen_q=seqlen, max_seqlen_k=seqlen, num_head_kv=nheads,
        qhead_per_kvhead=1, pack_gqa=False, batch_size=batch, causal=False, local=False,
        window_size_left=None, window_size_right=None, num_splits=1, device=None, seqlen_q=seqlen)
    notes = [f"workload {w}: MHA (pack_gqa False), no LSE (no grad), num_splits {cfg.num_splits}",
             f"tiles {cfg.m_block_size} x {cfg.n_block_size} from FA4's _get_fwd_config"]
    if arch_num // 10 == 9:
        from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
        kernel = FlashAttentionForwardSm90(
            cutlass.BFloat16, d, d, 1, is_causal=False, is_local=False, pack_gqa=False,
            tile_m=cfg.m_block_size, tile_n=cfg.n_block_size, num_stages=2, num_threads=384, Q_in_regs=False,
            intra_wg_overlap=cfg.intra_wg_overlap, mma_pv_is_rs=cfg.mma_pv_is_rs, mask_mod=None, score_mod=None,
            has_aux_tensors=False, q_subtile_factor=1, paged_kv_non_tma=False)
        notes += ["num_stages 2 and num_threads 384 (1 producer + 2 consumer warpgroups): the interface's constants",
                  f"mma_pv_is_rs {cfg.mma_pv_is_rs}, intra_wg_overlap {cfg.intra_wg_overlap} (hdim 128 config)",
                  "not persistent (SingleTileScheduler), cluster 1x1"]
        return kernel, notes
    from flash_attn.cute.flash_fwd_sm100 import FlashAttentionForwardSm100
    # The interface's use_2cta_instrs for this workload: dense, not split, not causal/local, hdim 128,
    # more than one M block (seqlen 4096 > q_stage * tile_m) and not disabled (CUDA-12 torch, FA_DISABLE_2CTA).
    fa4_2cta = not utils._get_disable_2cta_default(is_fwd=True) and cfg.num_splits == 1 \
        and seqlen > cfg.q_stage * cfg.m_block_size and math.ceil(d / 16) * 16 == 128
    use_2cta = fa4_2cta if two_cta is None else two_cta
    # S ping-pong needs one Q tile per CTA; with q_stage 2 it is off.
    s_ping_pong = not utils._get_disable_s_ping_pong_default() and cfg.q_stage == 1 \
        and cfg.m_block_size == 128 and cfg.n_block_size == 128
    kernel = FlashAttentionForwardSm100(
        d, d, qhead_per_kvhead=1, is_causal=False, is_local=False, is_split_kv=False, pack_gqa=False,
        m_block_size=cfg.m_block_size, n_block_size=cfg.n_block_size, q_stage=cfg.q_stage,
        is_static_persistent=True, score_mod=None, mask_mod=None, has_aux_tensors=False, paged_kv_non_tma=False,
        is_varlen_q=False, q_subtile_factor=1, kv_subtile_factor=1, use_2cta_instrs=use_2cta,
        use_clc_scheduler=False, seqlen_k_per_split=None, has_tile_count_semaphore=False,
        use_s_ping_pong=s_ping_pong)
    notes += [f"q_stage {cfg.q_stage}: seqlen {seqlen} > tile_m (two Q tiles per CTA, one per softmax warpgroup)",
              f"2-CTA {use_2cta}" + (" (forced)" if two_cta is not None else
                                     ": FA4's choice with a torch whose CUDA is not 12.x (CPU torch; the device's "
                                     "CUDA 13); under a CUDA-12 torch FA4 runs 1-CTA"),
              "static persistent scheduler (dense non-causal), CLC off (FA_CLC unset; dense non-causal excludes it)",
              f"S ping-pong {s_ping_pong} (needs q_stage 1)"]
    return kernel, notes


def _config_of(kernel) -> dict:
    """The kernel object's plain attributes (its configuration, before ``__call__`` adds more)."""
    plain = (bool, int, float, str, tuple, type(None))
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(vars(kernel).items())
            if isinstance(v, plain) or type(v).__name__ == "SchedulingMode"} | {"class": type(kernel).__name__}


def _interface_kernel(arch: str):
    """The kernel object ``flash_attn_func`` builds for the workload, intercepted at ``cute.compile``
    (fake CUDA tensors, nothing compiled or run)."""
    import cutlass.cute as cute
    import torch
    from flash_attn.cute import interface
    from torch._subclasses.fake_tensor import FakeTensorMode

    class Intercepted(Exception):
        pass

    seen = []

    def intercept(*args, **kwargs):
        seen.append(args[0])
        raise Intercepted

    w = WORKLOAD
    plain = cute.compile
    cute.compile = intercept
    try:
        with FakeTensorMode(), fa4_compile_keys() as keys:
            q, k, v = (torch.empty(w["batch"], w["seqlen"], w["heads"], w["head_dim"], dtype=torch.bfloat16,
                                   device="cuda") for _ in range(3))
            try:
                interface.flash_attn_func(q, k, v, causal=w["causal"])
            except Intercepted:
                pass
    finally:
        cute.compile = plain
    if not seen or not keys:
        raise RuntimeError("flash_attn_func compiled nothing (an FA4 JIT cache hit?)")
    return seen[0], config_of_key(keys[-1])


class _HardwareInfo:
    """Stands in for ``cutlass.utils.HardwareInfo`` while tracing (it needs a driver)."""
    sm_count = 0

    def __init__(self, *args, **kwargs):
        pass

    def get_device_multiprocessor_count(self):
        return self.sm_count

    def get_max_active_clusters(self, cluster_size):
        return self.sm_count // cluster_size


def _fake_args(kernel, arch: str, softmax_scale: float) -> list:
    """``_flash_attn_fwd``'s compile arguments for the workload, with symbolic tensors."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor
    from flash_attn.cute.utils import AuxData

    def qkvo():
        shape = (cute.sym_int(), cute.sym_int(), cute.sym_int(), cute.sym_int())
        stride = (cute.sym_int64(), cute.sym_int64(), cute.sym_int64(), 1)
        return make_fake_tensor(cutlass.BFloat16, shape, stride, assumed_align=16)

    # q, k, v, o, lse, scale, cu_seqlens_q/k, seqused_q/k, page_table, window left/right, learnable_sink
    args = [kernel, qkvo(), qkvo(), qkvo(), qkvo(), None, softmax_scale] + [None] * 8
    sm100 = arch == "sm_100a"
    if sm100:
        args.append(None)                                    # descale tensors
    args += [None, AuxData(None, None)]                      # block sparsity, aux data
    if sm100:   # num_splits_dynamic, semaphore, virtual batch, nheads in L2, 3 varlen hints; max_seqlen_q
        args += [None] * 7 + [WORKLOAD["seqlen"]]
    else:       # cu_total_m_blocks, cu_total_splits_m_blocks
        args += [None, None]
    args.append(make_fake_stream(use_tvm_ffi_env_stream=True))
    return args


def _build(arch: str, out: Path, two_cta: bool | None) -> None:
    import math

    import cutlass
    import cutlass.cute as cute

    kernel, notes = _kernel(arch, two_cta)
    config = _config_of(kernel)
    fa4_config = None          # what a GPU run records of FA4 (reference.stock.fa4_config): FA4's own choice only
    if two_cta is not None:
        check = "forced"
    else:
        interface_kernel, fa4_config = _interface_kernel(arch)
        theirs = _config_of(interface_kernel)
        diff = {k: (config.get(k), theirs.get(k)) for k in config.keys() | theirs.keys()
                if config.get(k) != theirs.get(k)}
        check = "agrees" if not diff else f"differs from flash_attn_func's kernel (ours, theirs): {diff}"

    import flash_attn.cute.tile_scheduler as tile_scheduler
    _HardwareInfo.sm_count = SM_COUNT[arch]
    cutlass.utils.HardwareInfo = _HardwareInfo
    tile_scheduler.HardwareInfo = _HardwareInfo
    storage = []
    if hasattr(kernel, "_get_shared_storage_cls"):      # sm_90: the struct is built inside __call__
        plain = kernel._get_shared_storage_cls

        def shared_storage_cls():
            storage.append(plain())
            return storage[-1]

        kernel._get_shared_storage_cls = shared_storage_cls

    dump = out / "dump"
    dump.mkdir()
    options = f"--enable-tvm-ffi --gpu-arch {arch} --keep-cubin --keep-ptx --dump-dir {dump}"
    start = time.perf_counter()
    cute.compile(*_fake_args(kernel, arch, 1.0 / math.sqrt(WORKLOAD["head_dim"])), options=options)
    seconds = time.perf_counter() - start
    cubins, ptxs = sorted(dump.glob("*.cubin")), sorted(dump.glob("*.ptx"))
    if len(cubins) != 1 or len(ptxs) != 1:
        raise RuntimeError(f"expected one cubin and one PTX in {dump}, found {cubins + ptxs}")
    os.rename(cubins[0], out / "kernel.cubin")
    os.rename(ptxs[0], out / "kernel.ptx")
    shutil.rmtree(dump)

    shared = getattr(kernel, "shared_storage", None) or (storage[-1] if storage else None)
    smem = shared.size_in_bytes() if shared is not None else None
    sm100 = arch == "sm_100a"
    if sm100:
        m_block, q_stage, tile_n = kernel.m_block_size, kernel.q_stage, kernel.n_block_size
        softmax_threads = 32 * len((*kernel.softmax0_warp_ids, *kernel.softmax1_warp_ids))
        rows, stages, cluster = 1, kernel.kv_stage, kernel.cta_group_size
        emulated = ex2_emulated(tile_n, kernel.ex2_emu_freq, kernel.ex2_emu_start_frg)
        regs = {"softmax": kernel.num_regs_softmax, "correction": kernel.num_regs_correction,
                "other": kernel.num_regs_other}
        notes.append(f"ex2 emulation: freq {kernel.ex2_emu_freq}, start fragment {kernel.ex2_emu_start_frg}, "
                     f"res {EX2_EMU_RES}: {emulated} of {tile_n} exponentials per row per K/V tile on the FMA pipe")
        notes.append(f"{kernel.kv_stage} K/V stages (as many as fit in 224 KB), TMEM {kernel.tmem_total} columns")
    else:
        m_block, q_stage, tile_n = kernel.tile_m, 1, kernel.tile_n
        softmax_threads = kernel.num_mma_threads           # the consumer warpgroups (one producer warpgroup)
        rows, stages, cluster, emulated = 2, kernel.num_stages, 1, 0
        regs = {"producer": kernel.num_producer_regs, "consumer": kernel.num_mma_regs}
    meta = {"arch": arch, "versions": versions(), "workload": WORKLOAD, "compile_seconds": seconds,
            "tile_m": q_stage * m_block, "tile_n": tile_n, "head_dim": WORKLOAD["head_dim"],
            "two_cta": cluster == 2, "smem_bytes": smem, "notes": notes, "m_block_size": m_block,
            "q_stage": q_stage, "num_stages": stages, "cluster_size": cluster, "softmax_threads": softmax_threads,
            "rows_per_thread": rows, "ex2_emulated_per_tile": emulated, "setmaxnreg": regs, "config": config,
            "interface_check": check, "fa4_config": fa4_config}
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))


def main(argv: list[str]) -> int:
    """``build ARCH DIR [--two-cta | --one-cta]``: build into DIR (kernel.cubin, kernel.ptx, meta.json)."""
    if len(argv) < 3 or argv[0] != "build":
        print("usage: python -m harness.compiler.fa4_build build ARCH DIR [--two-cta | --one-cta]", file=sys.stderr)
        return 2
    arch, out = argv[1], Path(argv[2])
    two_cta = {"--two-cta": True, "--one-cta": False}.get(argv[3]) if len(argv) > 3 else None
    _build(arch, out, two_cta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The text edits of the Blackwell steps' MMA-issue-path experiments (issue #29): FA4's register
split and stage-first operand slicing, in b13 and b14 (harness/core/experiment_edits.py has the
format; harness/core/experiments.py the registry). Each edit touches only the step's register
constants or its MMA warp's ``cute.gemm`` lines, never its launch code."""

from harness.core.experiment_edits import stage_first_operands

# FA4's 2-CTA register split (flash_attn/cute/flash_fwd_sm100.py with 2 CTAs: setmaxnreg.inc 184
# for the softmax warpgroups, dec 80 for the correction warpgroup, dec 64 for the rest) in place
# of the ladder's 192 / 80 / 48. The same pool: 2 x 128 x 184 + 128 x 80 + 128 x 64 = 65,536 =
# 128 registers at launch x 512 threads. The fourth warpgroup (MMA, load and the two idle warps,
# warps 12-15) takes 64; the softmax gives up 8.
REGISTERS_184_80_64 = (
    ("SOFTMAX_REGISTERS = 192\n", "SOFTMAX_REGISTERS = 184\n"),
    ("OTHER_REGISTERS = 48\n", "OTHER_REGISTERS = 64\n"),
)

# b13's and b14's gemm lines in the MMA warp, each with its own indentation (b14's sit one level
# deeper, inside the work-tile loop): the prologue's S_g(0), the loop's P_g V(j-1) and S_g(j), the
# tail's P_g V. Sliced stage first, Q by its Q tile and K/V by their ring stage before the k-block
# (tSrK[None, None, None, stage][None, None, kb]): each GEMM builds its stage's descriptor once
# and each k-block adds an immediate to it.
def _gemm_lines(pad: str) -> tuple[str, ...]:
    return (
        f"{pad}        cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, stage], tStS[g])\n",
        f"{pad}            cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], "
        "tOrVt[None, None, kb, prev_stage],\n",
        f"{pad}            cute.gemm(tiled_mma, tStS[g], tSrQ[None, None, kb, g], tSrK[None, None, kb, stage], "
        "tStS[g])\n",
        f"{pad}        cute.gemm(tiled_mma_pv, tOtO[g], tOrP[g][None, None, kb], tOrVt[None, None, kb, last_stage],\n",
    )


B13_STAGE_FIRST = stage_first_operands(*_gemm_lines("    "))
B14_STAGE_FIRST = stage_first_operands(*_gemm_lines("        "))

"""Generated blocks read from the compiled kernels and their source (any machine, no GPU):
``sass <step> [<against>]``, ``roles <step>``, ``tmem <step>``, ``code <step> [<against>]``,
``budget <step> ...``, ``mma-gaps <step>``."""

from __future__ import annotations

from harness.compiler import mma_issue
from harness.compiler import softmax_budget as sb
from harness.compiler.compile import compile_step
from harness.compiler.sass import MECHANISMS, ROLE_OPCODES, register_regions
from harness.core import results
from harness.core.paths import ROOT
from harness.core.steps import predecessor, resolve
from harness.report.code_diff import changed_lines, code_diff, kernel_loop
from harness.report.tables import NOT_RUN_B200, markdown_table, measured_on
from ladder.contract import ARCH_CAPABILITY


def sass_block(step_id: str, against: str | None = None) -> str:
    step = resolve(step_id)
    other = resolve(against) if against else None
    columns = [(step, arch) for arch in step.info.archs]
    if other:
        columns = [(other, a) for a in other.info.archs if a in step.info.archs][:1] + columns[:1]
    reports = [compile_step(s, a) for s, a in columns]
    headers = ["instruction", *(f"{s.id} {a}" for s, a in columns)]
    table = []
    for name, _, meaning in MECHANISMS:
        counts = [r.sass.mechanisms.get(name, 0) for r in reports]
        if any(counts):
            table.append([f"`{name}` ({meaning})", *counts])
    table.append(["registers / thread", *(r.registers for r in reports)])
    table.append(["spills (LDL/STL instructions + local bytes)", *(r.sass.spills for r in reports)])
    table.append(["threads / CTA", *(r.threads_per_cta for r in reports)])
    table.append(["smem bytes / CTA", *(s.info.smem_bytes for s, _ in columns)])
    if any(s.info.tmem_cols for s, _ in columns):
        table.append(["TMEM columns / CTA", *(s.info.tmem_cols or 0 for s, _ in columns)])
    return markdown_table([[str(c) for c in r] for r in table], headers) + "\n\n" + built_by(reports) + "\n"


def built_by(reports) -> str:
    """Which compiler made the SASS a block counts: its numbers are this ptxas's, not any other's."""
    versions = sorted({r.sass.ptxas or "unknown" for r in reports})
    return f"Compiled on a CPU by ptxas {' and '.join(versions)} (`ladder sass`; harness/core/toolchain.py)."


def _role_of(region, by_registers: dict) -> str:
    """A setmaxnreg region's role: the INFO ``registers`` key with its count; where several roles
    share a count ("other"), the instructions say which one it is."""
    if region.out_of_line:
        return "out of line: wait retries after the last EXIT (any role)"
    if region.registers is None:
        return "before the roles split"
    name = by_registers.get(region.registers, "?")
    if name == "other":
        found = [role for role, op in (("MMA", "UTCHMMA"), ("load", "UTMALDG"), ("epilogue", "UTMASTG"))
                 if region.count(op)]
        listed = ", ".join(found[:-1]) + " and " + found[-1] if len(found) > 1 else "".join(found)
        name = f"other: {listed} warps" if found else "other: warps without a role"
    return name


def roles_block(step_id: str) -> str:
    """``roles bNN``: per role (a setmaxnreg region of the SASS), its registers, spill stores and
    loads, and the instructions that say what the role does."""
    step = resolve(step_id)
    by_registers = {n: role for role, n in step.info.extra.get("registers", {}).items()}
    report = compile_step(step, step.info.archs[0])
    rows = [[_role_of(r, by_registers), "" if r.out_of_line else str(r.registers or report.registers), *(str(r.count(op)) for op in ROLE_OPCODES)]
            for r in register_regions(report.sass.text)]
    return (markdown_table(rows, ["role (setmaxnreg region)", "registers", *(f"`{op}`" for op in ROLE_OPCODES)])
            + f"\n\n`{step.spec}` compiled for {step.info.archs[0]}: the SASS split at each `USETMAXREG`, in address "
            "order; registers before the split are the launch's. The code ptxas places after the kernel's last "
            "`EXIT` (mbarrier waits' retry loops, reached from every role) is counted apart. "
            + built_by([report]) + "\n")


def tmem_block(name: str) -> str:
    """Text picture of a Blackwell step's tensor-memory columns (its INFO.extra["tmem_map"], which
    tests/test_blackwell_steps.py holds to the offsets the kernel uses), one character per 8 columns."""
    step = resolve(name)
    regions, aliases = step.info.extra["tmem_map"], step.info.extra.get("tmem_aliases", {})
    cols, per_char = step.info.tmem_cols, 8

    def ruler_line(spans):
        line = [" "] * (cols // per_char)
        for label, (start, width) in spans.items():
            cells = width // per_char
            text = ("|" + label).ljust(cells, "-")[:cells]
            line[start // per_char:start // per_char + cells] = list(text)
        return "".join(line).rstrip() + ("|" if spans is regions else "")

    ticks = "".join(f"{c:<16d}" for c in range(0, cols, 128)) + str(cols)
    lines = [f"{step.id}: {cols} TMEM columns x 128 lanes (lane = query row; warp w reads lanes 32*(w%4)..+31)",
             f"column  {ticks}", f"        {ruler_line(regions)}"]
    if aliases:
        spans = {label: (regions[inside][0] + offset, width) for label, (inside, offset, width) in aliases.items()}
        lines.append(f"        {ruler_line(spans)}   <- bf16 P written over the S columns it came from")
    return "```\n" + "\n".join(lines) + "\n```\n"


CODE_CHANGED_LINES = 80      # a code block shows at most this many removed/added lines (b02 and h02 rewrite 01)
EXCERPT_LINES = 48           # an excerpt, at the top of a page, shows at most this many diff lines


def code_block(step_id: str, against: str | None = None) -> str:
    """The step's change in code: a diff of its code lines against its predecessor's (or against
    ``against``), docstrings and comments stripped (harness/report/code_diff.py), cut after the first
    CODE_CHANGED_LINES changed lines. A step with no predecessor shows its kernel's main loop."""
    step = resolve(step_id)
    other = resolve(against) if against else predecessor(step)
    path = step.path.relative_to(ROOT).as_posix()
    if other is None:
        name, first, last, lines = kernel_loop(step.path.read_text())
        return (f"{step.id} has no predecessor to diff against: it is where the ladder starts. Its kernel's main "
                f"loop instead (`{name}` in {path}, lines {first}-{last}), docstrings and comments stripped:\n\n"
                "```python\n" + "\n".join(lines) + "\n```\n")
    command = f"ladder diff --code {other.id} {step.id}" if against else f"ladder diff --code {step.id}"
    head = f"`{command}`: the code lines that change, docstrings and comments stripped.\n\n"
    return head + _shown_diff(code_diff(other.path, step.path), command, step, other)


def excerpt_block(step_id: str, *functions: str) -> str:
    """The heart of a step's change for the top of its page: the hunks of its code diff against its
    predecessor that change a line inside the named functions (the whole diff is the ``code`` block)."""
    step = resolve(step_id)
    other = predecessor(step)
    if other is None:
        raise ValueError(f"{step.id} has no predecessor: an excerpt is a diff against one")
    names = ", ".join(f"`{f}`" for f in functions)
    command = f"ladder diff --code {step.id} --in {' '.join(functions)}"
    diff = code_diff(other.path, step.path, context=2, within=functions)
    if not diff:
        raise ValueError(f"no code change of {step.id} lies inside {names}")
    head = (f"`{command}`: the hunks of the step's code diff that change a line inside {names} (a hunk "
            "shows the whole run of nearby changes), docstrings and comments stripped.\n\n")
    lines = diff.splitlines()
    if len(lines) <= EXCERPT_LINES:
        return head + "```diff\n" + diff + "```\n"
    return (head + "```diff\n" + "\n".join(lines[:EXCERPT_LINES]) + "\n```\n\n"
            f"... {len(lines) - EXCERPT_LINES} more lines ({changed_lines(chr(10).join(lines[EXCERPT_LINES:]))} "
            "of them changed): the whole diff is in the page's first appendix, or run the command.\n")


def _shown_diff(diff: str, command: str, step, other) -> str:
    """A code diff as a Markdown block, cut after CODE_CHANGED_LINES changed lines."""
    if not diff:
        return f"(no code changes: {step.id} and {other.id} differ at most in docstrings and comments)\n"
    lines, shown, changed = diff.splitlines(), [], 0
    for line in lines:
        if changed == CODE_CHANGED_LINES:
            break
        shown.append(line)
        changed += changed_lines(line)
    text = "```diff\n" + "\n".join(shown) + "\n```\n"
    if len(shown) < len(lines):
        text += (f"\n... {len(lines) - len(shown)} more lines ({changed_lines(diff) - changed} of them changed): "
                 f"run `{command}` for the whole diff.\n")
    return text


def budget_block(*step_ids: str) -> str:
    """The softmax instruction budget (harness/compiler/softmax_budget.py) of each step on each of its archs:
    main-loop instructions per score element by class, and for sm_100a the issue-cycle arithmetic
    per K/V tile against the tensor cores' cycles."""
    steps = [resolve(s) for s in step_ids]
    budgets = [sb.budget(step, arch) for step in steps for arch in step.info.archs]
    headers, rows = sb.table(budgets)
    out = [markdown_table(rows, headers), "",
           "Per thread and K/V tile: the instructions of the main loop's body (one pass = one tile) over the "
           "E score elements the thread owns; the classes sum to the total. Static counts from the SASS, not a "
           "measurement. " + built_by([compile_step(step, arch) for step in steps for arch in step.info.archs])]
    for b in budgets:
        if b["arch"] != "sm_100a" or not b.get("loop"):
            continue
        c = sb.tile_cycles(b)
        step = resolve(b["step"])
        note = "" if measured_on(results.latest_for(step.id), ARCH_CAPABILITY["sm_100a"]) else f" ({NOT_RUN_B200})"
        out.append(f"\n{b['step']}{note}: issue {b['total_per_element']:.2f} instr/element x {c['elements']:,} "
                   f"elements ({b['tile_m']}x{b['tile_n']}) / {sb.WARP} threads per warp / {sb.SCHEDULERS_PER_SM} "
                   f"schedulers = {c['issue']:,.0f} cycles ({c['issue_low']:,.0f} without the conditional blocks) "
                   f"per K/V tile per CTA; tensor cores 2 GEMMs x 2 x {b['tile_m']}x{b['tile_n']}x{b['head_dim']} "
                   f"FLOP / {c['flop_per_clk']:,} dense FLOP/clk/SM (B200) = {c['mma']:,.0f} cycles: "
                   f"issue / MMA = {c['issue'] / c['mma']:.2f}.")
    return "\n".join(out) + "\n"


def mma_gaps_block(step_id: str) -> str:
    """The MMA warp's issue path (harness/compiler/mma_issue.py) beside FA4's sm100 kernel in the
    step's CTA-group choice, both built by the same ptxas."""
    step = resolve(step_id)
    headers, rows = mma_issue.rows(mma_issue.readings(step))
    return (markdown_table(rows, headers) + "\n\nStatic counts from the SASS, program order (`ladder sass "
            f"{step.spec} --mma-gaps`); FA4's kernel from flash-attn-4 for the same workload. "
            + built_by([compile_step(step, "sm_100a")]) + "\n")


BLOCKS = {"sass": sass_block, "roles": roles_block, "tmem": tmem_block, "code": code_block, "excerpt": excerpt_block,
          "budget": budget_block,
          "mma-gaps": mma_gaps_block}

"""What a CPU can prove about a step: ``ladder sass`` (mechanism instructions, registers, spills,
smem, against another step) and ``ladder bound`` (the bound model from the SASS)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.table import Table

from harness.cli.common import console, shown
from harness.compiler import cluster_audit, mma_issue, ptx_lint, register_budget, softmax_budget
from harness.compiler.compile import CompileReport, compile_step, cubin_facts, fresh_cubin_facts, launch_facts
from harness.compiler.sass import MECHANISMS
from harness.compiler.smem_budget import shared_storage_bytes
from harness.core import results, toolchain
from harness.core.provenance import collect, version_of
from harness.core.steps import Step, discover, resolve
from harness.model import bound, units
from harness.model.mma_pipe import issue_order


# ----------------------------------------------------------------------------------------- sass
def fingerprint_problems(step: Step, report) -> list[str]:
    problems = [f"{m} missing" for m in step.info.sass_present if not report.sass.mechanisms.get(m)]
    problems += [f"{m} present" for m in step.info.sass_absent if report.sass.mechanisms.get(m)]
    if report.sass.target != report.arch:
        problems.append(f"binary targets {report.sass.target}, not {report.arch}")
    return problems


def sass_table(step: Step, arch: str, against: Step | None) -> int:
    with console.status(f"compiling {step.id} for {arch} (no GPU needed)..."):
        report = compile_step(step, arch)
        other = compile_step(against, arch) if against else None
    table = Table(title=f"{step.id} on {arch}: mechanism instructions" + (f", against {against.id}" if against else ""))
    table.add_column("instruction")
    table.add_column("meaning")
    if other:
        table.add_column(against.id, justify="right")
    table.add_column(step.id, justify="right")
    if other:
        table.add_column("delta", justify="right")
    for name, _, meaning in MECHANISMS:
        now = report.sass.mechanisms.get(name, 0)
        before = other.sass.mechanisms.get(name, 0) if other else 0
        if not now and not before:
            continue
        cells = [name, meaning] + ([str(before)] if other else []) + [str(now)]
        if other:
            cells.append(f"{now - before:+d}" if now != before else "")
        table.add_row(*cells)
    for label, meaning, a, b in (
            ("registers", "per thread", other.registers if other else 0, report.registers),
            ("spills", "LDL/STL instructions + local bytes", other.sass.spills if other else 0, report.sass.spills),
            ("threads/CTA", "", other.threads_per_cta if other else 0, report.threads_per_cta),
            ("smem bytes", "INFO.smem_bytes", against.info.smem_bytes if other else 0, step.info.smem_bytes),
            ("smem struct bytes", "the kernel's shared storage, evaluated here", smem_struct(against) if other else 0,
             smem_struct(step)),
            ("TMEM columns", "", (against.info.tmem_cols or 0) if other else 0, step.info.tmem_cols or 0)):
        if (label == "TMEM columns" and not (a or b)) or (label == "smem struct bytes" and b is None):
            continue
        delta = [f"{b - a:+d}" if a is not None and b != a else ""] if other else []
        table.add_row(label, meaning, *([str(a if a is not None else "—")] if other else []), str(b), *delta)
    if arch == "sm_100a" and step.info.tmem_cols:
        table.add_row("tcgen05.mma order", "by accumulator, PTX order", *([issue_order(against)] if other else []),
                      issue_order(step), *([""] if other else []))
    console.print(table)
    problems = fingerprint_problems(step, report)
    claim = ", ".join(step.info.sass_present) + ("; none of " + ", ".join(step.info.sass_absent) if step.info.sass_absent else "")
    console.print(f"binary target: {report.sass.target}; built by ptxas {report.sass.ptxas} (the CuTe DSL's "
                  f"{toolchain.dsl_flavor()} build); compiled in {report.compile_seconds:.1f} s; "
                  f"cubin: {shown(report.cubin)}")
    if arch == "sm_100a" and step.info.tmem_cols:
        ptx = report.ptx.read_text()
        hazards = ptx_lint.tcgen05_ld_early_uses(ptx) + ptx_lint.tcgen05_st_unfenced_handoffs(ptx)
        problems += [f"TMEM ordering: {h}" for h in hazards]
        if not hazards:
            console.print("TMEM ordering (PTX lint, every path): no tcgen05.ld value used before tcgen05.wait::ld, "
                          "no tcgen05.st handed off before wait::st + fence::before_thread_sync")
    problems += _split_and_cluster(step, arch, report)
    if problems:
        console.print(f"[red]fingerprint claim ({claim}) FAILS: {'; '.join(problems)}[/red]")
        return 1
    console.print(f"[green]fingerprint claim holds:[/green] {claim}")
    return 0


def _split_and_cluster(step: Step, arch: str, report: CompileReport) -> list[str]:
    """The register split per warpgroup (where the PTX has setmaxnreg) and the cluster audit (where
    the kernel launches clusters): printed when they hold, returned as problems when not."""
    problems, ptx = [], report.ptx.read_text()
    if register_budget.ptx_setmaxnreg(ptx):
        try:
            b = register_budget.for_step(step, report)
            console.print(f"register split (setmaxnreg, per warpgroup, read from kernel()'s branches): "
                          f"{b['warpgroups']} x 128 threads = {b['total']:,} of {b['file']:,} registers in the SM, "
                          f"within the CTA's pool: {b['launch']} per thread at launch x {b['threads']} = {b['pool']:,}")
        except register_budget.RegisterBudgetError as e:
            problems.append(f"register split: {e}")
    if launch_facts(step, arch).get("cluster_launch"):
        found = cluster_audit.audit(ptx, two_cta_mma=step.info.extra.get("cta_group", 1) == 2)
        problems += [f"cluster: {p}" for p in found]
        if not found:
            console.print("cluster (PTX audit): barriers initialised, fenced and a cluster barrier taken before any "
                          "remote traffic, a cluster barrier or the MMA warps' handshake after the last (instruction order "
                          "only; draining the barriers is the protocol model's check)" + ("; every tcgen05 op cta_group::2, commits multicast, TMA barriers "
                                              "on the leader" if step.info.extra.get("cta_group", 1) == 2 else ""))
    return problems


def smem_struct(step: Step) -> int | None:
    """The step's shared-storage struct, sized on the CPU (steps that build it in ``make_shared_storage``)."""
    return shared_storage_bytes(step) if hasattr(step.module, "make_shared_storage") else None


def _budget_table(step: Step, arch: str, against: Step | None) -> int:
    """The softmax instruction budget (harness/compiler/softmax_budget.py): main-loop instructions per score element."""
    budgets = [softmax_budget.budget(s, arch) for s in ([against] if against else []) + [step]]
    headers, rows = softmax_budget.table(budgets)
    table = Table(title=f"softmax budget on {arch}: main-loop instructions per score element, per thread and K/V tile")
    for h in headers:
        table.add_column(h, justify="left" if h == headers[0] else "right")
    for row in rows:
        table.add_row(*(cell.replace("**", "") for cell in row))
    console.print(table)
    return 1 if any(b["ambiguous"] for b in budgets) else 0


def _mma_gaps_table(step: Step, against: Step | None) -> int:
    """The MMA warp's issue path (harness/compiler/mma_issue.py) beside FA4's, sm_100a."""
    with console.status("compiling (FA4's kernel too; no GPU needed)..."):
        headers, rows = mma_issue.rows(mma_issue.readings(step, against))
    table = Table(title="tcgen05 MMA issue path on sm_100a: instructions between consecutive MMAs, local memory")
    for h in headers:
        table.add_column(h, justify="left" if h == headers[0] else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return 0


def cmd_sass(args) -> int:
    step = resolve(args.step)
    against = resolve(args.against) if args.against else None
    archs = [args.arch] if args.arch else list(step.info.archs)
    if against:
        archs = [a for a in archs if a in against.info.archs] or archs[:1]
    code = 0
    for arch in archs:
        code |= sass_table(step, arch, against if against and arch in against.info.archs else None)
        if args.budget:
            code |= _budget_table(step, arch, against if against and arch in against.info.archs else None)
        if args.full:
            print(compile_step(step, arch).sass.text)
    if args.mma_gaps:
        if "sm_100a" not in step.info.archs:
            raise ValueError(f"--mma-gaps reads tcgen05 MMAs: {step.id} has no sm_100a build")
        code |= _mma_gaps_table(step, against if against and "sm_100a" in against.info.archs else None)
    return code


def cmd_bound(args) -> int:
    step = resolve(args.step)
    gpu_key = args.gpu or ("b200" if step.track == "blackwell" else "h200")
    with console.status(f"compiling {step.id} (no GPU needed)..."):
        b = bound.bound(step, gpu_key)
        ref = bound.fa4_bound(gpu_key)
    table = Table(title=f"{step.id} on {units_name(gpu_key)} (model): cycles per CTA and K/V tile")
    table.add_column("unit / term")
    table.add_column(step.id, justify="right")
    table.add_column("FA4", justify="right")
    for unit in b.units:
        table.add_row(unit, f"{b.units[unit]:,.0f}", f"{ref.units.get(unit, 0):,.0f}")
    for name, cyc in b.chain_terms.items():
        table.add_row(f"chain: {name}", f"{cyc:,.0f}", "")
    table.add_row("one CTA's chain", f"{b.chain:,.0f}", f"{ref.chain:,.0f}")
    table.add_row("CTAs per SM", str(b.ctas_per_sm), str(ref.ctas_per_sm))
    table.add_row("time per CTA and tile", f"{b.cycles:,.0f}", f"{ref.cycles:,.0f}")
    table.add_row("FLOP per cycle per SM", f"{b.flop_per_cycle:,.0f}", f"{ref.flop_per_cycle:,.0f}")
    console.print(table)
    console.print(f"structure: {b.structure} (INFO.extra['bound']); binds: {b.binding}; FA4 ({ref.structure}) "
                  f"binds: {ref.binding}")
    console.print(f"predicted fraction of FA4 (model, not a measurement): {bound.fraction_of(b, ref):.2f}")
    return 0


def cmd_toolchain(args) -> int:
    """The compiler this machine builds with, the one each results file's records were built with,
    and whether they agree (the CPU's proofs describe the kernels that were timed only if they do)."""
    here = toolchain.describe()
    step = resolve(args.step)
    with console.status(f"compiling {step.id} to read the ptxas stamp of its cubin..."):
        stamp = cubin_facts(step, step.info.archs[0])["ptxas"]
    console.print(f"this machine: nvidia-cutlass-dsl {version_of('nvidia-cutlass-dsl')}, compiler build "
                  f"{here['cutlass_dsl_libs']} (installed: {', '.join(here['flavours_installed']) or 'none'}), "
                  f"ptxas {here['ptxas']} (stamped in {step.id}'s cubin: {stamp}), nvdisasm {here['nvdisasm']}")
    if args.record:
        prov = collect()
        if not prov.get("gpu"):
            raise ValueError("ladder toolchain --record notes what a GPU machine builds with; this one has no GPU")
        # Every ladder step, for every arch it targets: the digest of the machine code this machine's
        # compiler makes of it. The CPU's builds must make the same (tests/test_results.py).
        builds = [(s, arch) for s in discover() if not s.variant for arch in s.info.archs]
        with console.status(f"compiling every step, each in a fresh process ({len(builds)} builds)..."), \
                ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
            facts = pool.map(lambda build: fresh_cubin_facts(*build), builds)
            code = {f"{s.id} {arch}": {**f, "fingerprint": s.fingerprint} for (s, arch), f in zip(builds, facts, strict=True)}
        entry = {**here, "cubin_ptxas": stamp, "step": step.id, "machine_code": code, "provenance": prov}
        results.record_toolchain(Path(args.record), entry)
        console.print(f"recorded the machine code of {len(code)} builds into {args.record}")
    code = 0
    for gpu_key, data in results.all_recorded().items():
        wrong = results.ptxas_mismatches(data, here["ptxas"])
        for ptxas, where in sorted(results.recorded_ptxas(data).items()):
            verdict = ("[green]same major version[/green]" if ptxas not in wrong else
                       "[red]not recorded[/red]" if ptxas == "not recorded" else "[red]another major version[/red]")
            console.print(f"results/{gpu_key}.json: {len(where)} records built by ptxas {ptxas}: {verdict}")
        code |= bool(wrong)
    if code:
        console.print("[red]the CPU's SASS tables and models are not of the kernels those records timed: install "
                      "the CuTe DSL build they were measured with (pyproject pins nvidia-cutlass-dsl\\[cu13])[/red]")
    return code


def units_name(gpu_key: str) -> str:
    return units.gpu(gpu_key).name


def add_commands(sub) -> None:
    s = sub.add_parser("sass", help="mechanism instruction histogram, registers, spills (any machine)")
    s.add_argument("step")
    s.add_argument("--against")
    s.add_argument("--arch", choices=("sm_90a", "sm_100a"))
    s.add_argument("--full", action="store_true", help="also print the whole disassembly")
    s.add_argument("--budget", action="store_true", help="also the softmax budget: main-loop instructions per score element")
    s.add_argument("--mma-gaps", action="store_true",
                   help="also the tcgen05 MMA issue path beside FA4's: instructions between MMAs, local memory (sm_100a)")
    s.set_defaults(fn=cmd_sass)
    s = sub.add_parser("bound", help="what bounds a step: cycles per K/V tile of each SM unit, from its SASS, "
                                     "combined by its overlap structure; predicted fraction of FA4 (any machine)")
    s.add_argument("step")
    s.add_argument("--gpu", choices=("h200", "b200"), help="default: the step's own architecture's GPU")
    s.set_defaults(fn=cmd_bound)
    s = sub.add_parser("toolchain", help="which ptxas builds the kernels here, and which built each recorded result "
                                         "(any machine; exit 1 on a different major version)")
    s.add_argument("--step", default="01", help="the step compiled to read its cubin's ptxas stamp (default 01)")
    s.add_argument("--record", metavar="FILE", help="on a GPU machine: note what it builds with in this results file")
    s.set_defaults(fn=cmd_toolchain)

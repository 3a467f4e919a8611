"""Timeline probes: a step's phase markers turned into cycle-counter stores, in an instrumented copy
of the step that measures when each warp of one CTA begins and ends each phase of each K/V tile.

A step names its phases with comment lines in its kernel, at the statement they bracket::

    # timeline: softmax begin
    ...
    # timeline: softmax end

Comments never reach the compiled kernel nor the code hash, so the step is measured as it is.
``instrumented_source`` turns every marker line into a call that lane 0 of each warp of one CTA
(block (0, 0, 0)) makes: read the SM's cycle counter (``clock64``) and store it at (warp, tile,
phase, begin/end) of a small int64 buffer, a kernel argument the instrumented copy adds. The copy
is built under build/timeline/ and run once at the benchmark shape of seqlen 8k
(harness/gpu/timeline_run.py, in a child process); the intervals of the first ``KEPT_TILES`` tiles
(harness/timeline/records.py) are recorded with
provenance under "timelines" in the results file, with the instrumented kernel's own time next to
the plain step's (the price of the probes) and its numerics.

A marker names its K/V tile by ``n_block`` (the loop's tile) unless it says otherwise:
``# timeline(n_block - 1): O{g} begin`` (a P V issued one iteration later), ``# timeline(0): ...``
(the prologue). Its phase name may hold ``{g}``, the Q tile the enclosing ``for g in
range(NUM_Q_TILES)`` loop is on (``S{g}`` becomes S0, S1). Phases are marked where they begin and
end in one warp's program order: for an asynchronous MMA that is its issue, not its execution.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.core.markers import Marker, markers
from harness.core.paths import BUILD, publish
from harness.core.steps import Step, code_sha256
from harness.model import protocol

BUILD_DIR = BUILD / "timeline"
BUFFER = "mTimeline"      # the argument the instrumented kernel gets
PROBE = protocol.PROBE    # the function each marker line becomes


def phase_names(module, source: str) -> list[str]:
    """Every phase the markers name, in order of first appearance, ``{g}`` expanded over the
    module's NUM_Q_TILES."""
    names: list[str] = []
    for m in markers(source):
        expanded = ([m.phase.replace("{g}", str(g)) for g in range(module.NUM_Q_TILES)]
                    if "{g}" in m.phase else [m.phase])
        names += [n for n in expanded if n not in names]
    return names


def check_markers(module, source: str) -> None:
    """Each phase's markers alternate begin, end (in source order; a phase may be marked in the
    prologue, the loop and the tail), each pair at one indentation and for one tile."""
    found = markers(source)
    if not found:
        raise ValueError("the kernel has no `# timeline: <phase> begin|end` markers")
    by_phase: dict[str, list[Marker]] = {}
    for m in found:
        by_phase.setdefault(m.phase, []).append(m)
    for phase, ms in by_phase.items():
        edges = [m.edge for m in ms]
        if edges != [0, 1] * (len(ms) // 2) or len(ms) % 2:
            found = ", ".join(f"{('begin', 'end')[m.edge]} at line {m.line}" for m in ms)
            raise ValueError(f"phase {phase!r}: {found}; want begin, end pairs")
        for b, e in zip(ms[::2], ms[1::2], strict=True):
            if b.indent != e.indent or b.tile != e.tile:
                raise ValueError(f"phase {phase!r}: begin (line {b.line}) and end (line {e.line}) are not in "
                                 "the same block or name different tiles")
        if "{g}" in phase and not hasattr(module, "NUM_Q_TILES"):
            raise ValueError(f"phase {phase!r} uses {{g}} but the step has no NUM_Q_TILES")


def _phase_expr(phase: str, names: list[str], module) -> str:
    """The probe's phase index: a constant, or for a ``{g}`` phase the first Q tile's index + g."""
    if "{g}" not in phase:
        return str(names.index(phase))
    index = [names.index(phase.replace("{g}", str(g))) for g in range(module.NUM_Q_TILES)]
    if index != list(range(index[0], index[0] + len(index))):
        raise ValueError(f"phase {phase!r}: its Q tiles are not consecutive phases")
    return f"{index[0]} + g"


SAMPLED = "_timeline_lane"  # 0 exactly on lane 0 of each warp of block (0, 0, 0): computed once per thread

_PROBE = f'''

@cute.jit
def {PROBE}({BUFFER}: cute.Tensor, n_block, phase, edge: cutlass.Constexpr, sampled):
    """GENERATED (harness/timeline/probes.py): lane 0 of each warp of block (0, 0, 0) (``sampled`` is 0
    there) stores the SM's cycle counter at (warp, tile, phase, edge)."""
    if sampled == 0:
        if n_block < cute.size({BUFFER}, mode=[1]):
            tidx, _, _ = cute.arch.thread_idx()
            {BUFFER}[tidx // 32, n_block, phase, edge] = cute.arch.clock64()
'''

# Where the kernel learns its thread index, it also works out once whether it is a sampled lane:
# (block x + y + z) * 32 + lane, which is 0 only there. Each probe then costs one compare elsewhere.
_SAMPLED_AT = "    tidx, _, _ = cute.arch.thread_idx()\n"
_SAMPLED_LINE = (_SAMPLED_AT + f"    {SAMPLED} = (cute.arch.block_idx()[0] + cute.arch.block_idx()[1] + "
                 "cute.arch.block_idx()[2]) * 32 + tidx % 32\n")

# The buffer rides next to mO in host's and kernel's signatures and in the launch.
_SIGNATURE_EDITS = ((r"(?<!\w)mO: cute\.Tensor,", f"mO: cute.Tensor, {BUFFER}: cute.Tensor,", 2),
                    (r"(?<!\w)mO, softmax_scale", f"mO, {BUFFER}, softmax_scale", 1),
                    (re.escape(_SAMPLED_AT), _SAMPLED_LINE, 1))


def _roles_with_markers(source: str) -> list[str]:
    """The module-level functions other than ``kernel`` that a probe will run in: those holding a
    marker, and those calling one of them (a role that calls a sub-role)."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in ("kernel", "host")}
    lines = {m.line for m in markers(source)}
    need = {name for name, d in defs.items() if any(d.lineno <= n <= d.end_lineno for n in lines)}
    grown = True
    while grown:
        more = {name for name, d in defs.items() if any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in need for c in ast.walk(d))}
        grown = bool(more - need)
        need |= more
    return sorted(need)


def _thread_buffer(text: str, roles: list[str]) -> str:
    """Give each role function the buffer and the sampled-lane flag as its first two parameters,
    and pass them at every call of it (calls come from the kernel or another such role)."""
    for name in roles:
        text, defs = re.subn(rf"^def {name}\(", f"def {name}({BUFFER}: cute.Tensor, {SAMPLED}, ", text, flags=re.M)
        if defs != 1:
            raise ValueError(f"timeline: `def {name}(` occurs {defs} times in the step, not once")
        text = re.sub(rf"(?<![\w.]){name}\((?!{BUFFER}: )", f"{name}({BUFFER}, {SAMPLED}, ", text)
    return text


def instrumented_source(module, source: str) -> str:
    """The step's file with every marker replaced by a probe and the buffer threaded through: into
    the kernel's signature and the launch, and into every warp-role function a marker sits in."""
    check_markers(module, source)
    names = phase_names(module, source)
    lines = source.splitlines()
    for m in markers(source):
        lines[m.line - 1] = (f"{m.indent}{PROBE}({BUFFER}, {m.tile}, {_phase_expr(m.phase, names, module)}, "
                             f"{m.edge}, {SAMPLED})  # timeline: {m.phase} {['begin', 'end'][m.edge]}")
    text = "\n".join(lines) + "\n"
    for pattern, new, count in _SIGNATURE_EDITS:
        # the sampled lane is computed in the kernel only (a role may read its own thread index)
        where = text.index("def kernel(") if pattern == re.escape(_SAMPLED_AT) else 0
        found = len(re.findall(pattern, text[where:]))
        if found < count or (found > count and where == 0):
            raise ValueError(f"timeline: `{pattern}` occurs {found} times in the step, not {count}")
        text = text[:where] + re.sub(pattern, lambda _m, new=new: new, text[where:], count=count)
    return _thread_buffer(text, _roles_with_markers(source)) + _PROBE


def materialize(step: Step) -> Path:
    """Write the instrumented copy of ``step`` to build/timeline/<id>_timeline.py."""
    source = step.path.read_text()
    text = (f"# GENERATED by harness/timeline/probes.py from {step.path.name}: every `# timeline:` marker is a probe.\n"
            + instrumented_source(step.module, source))
    return publish(BUILD_DIR / f"{step.id}_timeline.py", text)


def instrumented_step(step: Step) -> Step:
    from harness.core.steps import variant
    return variant(materialize(step))


def fingerprint(step: Step) -> dict:
    """The step's fingerprint plus the instrumented copy's code: moving a marker makes a recorded
    timeline stale even though the step's own hash ignores comments."""
    return {**step.fingerprint, "instrumented": code_sha256(instrumented_source(step.module, step.path.read_text()))}


def stale_reason(step: Step, record: dict) -> str | None:
    """Why a recorded timeline no longer describes the step (its code, contract, DSL or markers)."""
    from harness.core.results import stale_reason as row_stale_reason
    reason = row_stale_reason(step, record)
    if reason:
        return reason
    if record["fingerprint"].get("instrumented") != fingerprint(step)["instrumented"]:
        return "its timeline markers moved"
    return None


def compile_sass(step: Step, arch: str):
    """Compile the instrumented copy for ``arch`` on any machine (fake tensors) and read its SASS."""
    import tempfile

    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from harness.compiler import sass
    from ladder import contract

    q, k, v, o, scale, stream = contract.fake_arguments()
    buf = make_fake_tensor(cutlass.Int64, tuple(cute.sym_int() for _ in range(4)),
                           (cute.sym_int64(), cute.sym_int64(), cute.sym_int64(), 1), assumed_align=16)
    with tempfile.TemporaryDirectory() as tmp:       # the DSL writes nothing into a missing dump dir
        contract.compile_host(instrumented_step(step).module.host, arch, f"--keep-cubin --dump-dir {tmp}",
                              args=(q, k, v, o, buf, scale, stream))
        (cubin,) = Path(tmp).glob("*.cubin")
        return sass.read_cubin(cubin)

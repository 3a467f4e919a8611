"""A lint over a Blackwell step's PTX for the two tensor-memory orderings the kernels must keep:
a ``tcgen05.ld``'s registers are not used (beyond plain moves) before ``tcgen05.wait::ld``, and
what a thread wrote with ``tcgen05.st`` is handed to another thread (barrier, mbarrier arrive,
commit, MMA) only after ``tcgen05.wait::st`` and then ``tcgen05.fence::before_thread_sync``.
Every control-flow path through each function is followed (a small data-flow pass over the PTX)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- PTX lint: tensor-memory hand-offs -------------------------------------------------------
# Two orderings the tcgen05 PTX ISA leaves to the program, checked on a kernel's PTX text:
#   tcgen05.ld  -> its destination registers are undefined until tcgen05.wait::ld;
#   tcgen05.st  -> tcgen05.wait::st, then tcgen05.fence::before_thread_sync, before the thread
#                  synchronization that lets the MMA thread read what was stored (P, a rescaled O).
# Both are forward dataflow analyses over each function's control-flow graph (labels, ``bra``,
# ``ret``/``exit``; inline-asm ``{ }`` blocks scope their labels), so a branch around a wait is
# followed, not assumed away. A path's state is joined by union: a hazard on any path is reported.


@dataclass(frozen=True)
class PtxHazard:
    function: str
    line: int                 # 1-based line of the offending instruction in the PTX text
    instruction: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line} ({self.function[:40]}): {self.why}: {self.instruction[:100]}"


@dataclass(frozen=True)
class _PtxStmt:
    """A label (``label`` set) or an instruction (``opcode`` set), in text order."""
    line: int
    label: str | None = None
    scope: tuple = ()                 # the brace-scope path it lies in (inline asm opens one)
    guard: str = ""                   # "@%p3" / "@!%p3" / ""
    opcode: str = ""
    operands: str = ""

    @property
    def text(self) -> str:
        return f"{self.guard} {self.opcode} {self.operands}".strip()


_PTX_COMMENT_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_PTX_FUNC_RE = re.compile(r"\.(?:entry|func)\b")
_PTX_LABEL_RE = re.compile(r"([A-Za-z_$][\w$]*)\s*:(?!:)")
_PTX_REG_RE = re.compile(r"%[A-Za-z_$][\w$]*")


def _ptx_blank_comments(ptx: str) -> str:
    """Comments replaced by blanks (newlines kept, so offsets still give line numbers)."""
    return _PTX_COMMENT_RE.sub(lambda m: m.group(0) if m.group(0).startswith('"')
                               else re.sub(r"[^\n]", " ", m.group(0)), ptx)


def _ptx_functions(ptx: str) -> list[tuple[str, list[_PtxStmt]]]:
    """(name, statements) of every ``.entry``/``.func`` with a body, statements in text order."""
    text = _ptx_blank_comments(ptx)
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    from bisect import bisect_right

    def line_of(pos: int) -> int:
        return bisect_right(newlines, pos - 1) + 1

    functions = []
    for header in _PTX_FUNC_RE.finditer(text):
        i, depth, name = header.end(), 0, None
        while i < len(text):                       # the name (after an optional return list), then '{'
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif depth == 0 and c == ";":
                break                              # a prototype, no body
            elif depth == 0 and c == "{":
                break
            elif depth == 0 and name is None and (m := re.match(r"[A-Za-z_$][\w$]*", text[i:])):
                name = m.group(0)
                i += len(name)
                continue
            i += 1
        if i >= len(text) or text[i] != "{":
            continue
        stmts, scope, next_scope, i = [], [], 1, i + 1
        while i < len(text):
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                break
            c = text[i]
            if c == "{":
                scope.append(next_scope)
                next_scope += 1
                i += 1
                continue
            if c == "}":
                if not scope:
                    break                          # the function's closing brace
                scope.pop()
                i += 1
                continue
            if m := _PTX_LABEL_RE.match(text, i):
                stmts.append(_PtxStmt(line_of(i), label=m.group(1), scope=tuple(scope)))
                i = m.end()
                continue
            end = text.find(";", i)
            end = len(text) if end < 0 else end
            stmt = " ".join(text[i:end].split())
            start, i = i, end + 1
            if not stmt or stmt.startswith("."):   # .reg/.local/.pragma ... declarations
                continue
            guard = ""
            if stmt.startswith("@"):
                guard, _, stmt = stmt.partition(" ")
            opcode, _, operands = stmt.partition(" ")
            stmts.append(_PtxStmt(line_of(start), scope=tuple(scope), guard=guard, opcode=opcode,
                                  operands=operands.strip()))
        functions.append((name or "?", stmts))
    return functions


def _ptx_successors(stmts: list[_PtxStmt]) -> list[list[int]]:
    """Control-flow successors of each statement. A branch resolves to the label of that name in
    the innermost enclosing brace scope; an indirect branch (``brx.idx``) may go to any label."""
    labels = {(s.scope, s.label): k for k, s in enumerate(stmts) if s.label is not None}

    def target(scope: tuple, name: str) -> int:
        for depth in range(len(scope), -1, -1):
            if (scope[:depth], name) in labels:
                return labels[(scope[:depth], name)]
        raise ValueError(f"branch to an undefined label {name!r}")

    succs = []
    for k, s in enumerate(stmts):
        after = [k + 1] if k + 1 < len(stmts) else []
        root = s.opcode.split(".")[0]
        if s.label is not None or root not in ("bra", "brx", "ret", "exit", "trap"):
            succs.append(after)
        elif root == "bra":
            succs.append([target(s.scope, s.operands.split(",")[-1].strip())] + (after if s.guard else []))
        elif root == "brx":
            succs.append(sorted(set(labels.values())) + (after if s.guard else []))
        else:                                      # ret / exit / trap
            succs.append(after if s.guard else [])
    return succs


def _ptx_dataflow(stmts: list[_PtxStmt], entry: frozenset, transfer) -> list[frozenset]:
    """Forward may-analysis: the union, over every path from the function's entry, of the states
    reaching each statement (``transfer(stmt, state) -> state``). A guarded (``@%p``) instruction
    may or may not execute: its out-state is the union of both. Unreached statements get {}."""
    succs = _ptx_successors(stmts)
    state_in = [frozenset()] * len(stmts)
    if not stmts:
        return state_in
    state_in[0] = entry
    reached, work = {0}, [0]
    while work:
        k = work.pop()
        out = transfer(stmts[k], state_in[k])
        if stmts[k].guard:
            out |= state_in[k]
        for n in succs[k]:
            joined = state_in[n] | out
            if joined != state_in[n] or n not in reached:
                state_in[n] = joined
                reached.add(n)
                work.append(n)
    return state_in


def _ptx_regs(operands: str) -> list[str]:
    return _PTX_REG_RE.findall(operands)


def _ptx_split_dest(operands: str) -> tuple[str, str]:
    """First operand (a register or a ``{..}`` vector) and the rest."""
    depth = 0
    for i, c in enumerate(operands):
        depth += c == "{"
        depth -= c == "}"
        if c == "," and depth == 0:
            return operands[:i], operands[i + 1:]
    return operands, ""


def _ld_transfer(s: _PtxStmt, state: frozenset) -> frozenset:
    """Pending registers after ``s``: entries (register, line of its tcgen05.ld, is the ld's own
    destination rather than a copy)."""
    if s.label is not None:
        return state
    if s.opcode.startswith("tcgen05.wait::ld"):
        return frozenset()
    if s.opcode.startswith("tcgen05.ld"):
        dests = _ptx_regs(re.sub(r"\[[^\]]*\]", "", s.operands))
        return frozenset({e for e in state if e[0] not in dests} | {(r, s.line, True) for r in dests})
    if _ld_is_move(s, state):
        dest, src = _ptx_split_dest(s.operands)
        dests, srcs = _ptx_regs(dest), set(_ptx_regs(src))
        origins = {ld for reg, ld, _ in state if reg in srcs}
        return frozenset({e for e in state if e[0] not in dests} | {(r, ld, False) for r in dests for ld in origins})
    return state


def _ld_is_move(s: _PtxStmt, state: frozenset) -> bool:
    """A ``mov`` not guarded by a pending predicate: a data move, allowed before the wait."""
    return s.opcode.split(".")[0] == "mov" and not any(e[0] in _ptx_regs(s.guard) for e in state)


def _ld_violations(s: _PtxStmt, state: frozenset) -> list[str]:
    if s.label is not None or not state or s.opcode.startswith("tcgen05.wait::ld"):
        return []
    if _ld_is_move(s, state):
        dest = _ptx_regs(_ptx_split_dest(s.operands)[0])
        return [f"overwrites {reg}, the destination of the tcgen05.ld at line {ld}, before tcgen05.wait::ld"
                for reg, ld in sorted({(r, ld) for r, ld, own in state if own and r in dest})]
    named = set(_ptx_regs(s.guard)) | set(_ptx_regs(s.operands))
    reloaded = []
    if s.opcode.startswith("tcgen05.ld"):
        # its guard and address are uses; a destination still in flight from a load is a second
        # asynchronous write to it (one that is only a pending copy is just overwritten)
        address = " ".join(re.findall(r"\[[^\]]*\]", s.operands))
        reloaded = [f"loads into {reg} while the tcgen05.ld at line {ld} may still write it (no tcgen05.wait::ld)"
                    for reg, ld in sorted({(r, ld) for r, ld, own in state if own and r in named})]
        named = set(_ptx_regs(s.guard)) | set(_ptx_regs(address))
    return reloaded + [f"uses {reg} (from the tcgen05.ld at line {ld}) before tcgen05.wait::ld"
                       for reg, ld in sorted({(r, ld) for r, ld, _ in state if r in named})]


def tcgen05_ld_early_uses(ptx: str) -> list[PtxHazard]:
    """Uses of a ``tcgen05.ld`` result before the ``tcgen05.wait::ld`` that makes it defined.

    From a ``tcgen05.ld`` on, its destination registers are pending; a ``tcgen05.wait::ld`` makes
    every pending register defined. Until then:

    * a ``mov`` (any type, including the ``mov.b64 %rd, {%r, %r}`` packing and the
      ``mov.b64 {%r, %r}, %rd`` unpacking the CuTe DSL emits between the load and the wait) is a
      pure data move: it computes nothing, so it is allowed; its destination becomes pending too
      (a copy of a pending value), and stops being pending when a later ``mov`` overwrites it with
      a defined value. This relies on ptxas treating those moves as renames (in the SASS of
      b02..b08 no MOV sits between an LDTM and the use of its result);
    * any other instruction (arithmetic, compare, ``cvt``, ``prmt``, a store, another
      ``tcgen05.*``, a guard) that names a pending register anywhere is reported; so is a
      ``mov`` that overwrites a ``tcgen05.ld`` destination itself while the load is in flight.
      ``cvt`` is not a move: it converts (rounds, changes the value's bits), so it reads the value.

    "Until then" is along every control-flow path (labels, ``bra``, loops), not just in text
    order: a wait on one branch does not cover the other. Limitations: registers are matched by
    name (``%r12``), not by the vector lanes of a ``.v2``/``.v4`` operand; a non-``mov``
    instruction that only *writes* a pending copy is reported too (conservative); ``call`` is not
    followed into the callee (a callee's own ``tcgen05.ld``s are checked in its own body).
    """
    hazards = []
    for name, stmts in _ptx_functions(ptx):
        state_in = _ptx_dataflow(stmts, frozenset(), _ld_transfer)
        for s, state in zip(stmts, state_in, strict=True):
            hazards += [PtxHazard(name, s.line, s.text, why) for why in _ld_violations(s, state)]
    return hazards


_STORED, _WAITED, _FENCED = "stored", "waited", "fenced"


def _hands_tmem_off(opcode: str) -> bool:
    """An instruction after which another thread (the MMA issuer), or the tensor core itself, may
    read what this thread stored to TMEM: a barrier or mbarrier arrive, a release, an MMA or
    commit, a call (not followed)."""
    root = opcode.split(".")[0]
    return (root in ("bar", "barrier", "call")
            or opcode.startswith(("mbarrier.arrive", "cp.async.mbarrier.arrive", "tcgen05.mma",
                                  "tcgen05.commit"))
            or (root in ("st", "red", "atom") and (".release" in opcode or ".acq_rel" in opcode)))


def _st_transfer(s: _PtxStmt, state: frozenset) -> frozenset:
    """Entries (stored / waited / fenced, line of the tcgen05.st) after ``s``."""
    if s.label is not None:
        return state
    if s.opcode.startswith("tcgen05.st"):
        return frozenset({(_STORED, s.line)})
    if s.opcode.startswith("tcgen05.wait::st"):
        return frozenset((_WAITED if kind == _STORED else kind, st) for kind, st in state)
    if s.opcode.startswith("tcgen05.fence::before_thread_sync"):
        return frozenset((_FENCED if kind == _WAITED else kind, st) for kind, st in state)
    return state


def tcgen05_st_unfenced_handoffs(ptx: str) -> list[PtxHazard]:
    """Hand-offs of tensor memory written by ``tcgen05.st`` without ``tcgen05.wait::st`` and then
    ``tcgen05.fence::before_thread_sync``.

    Per thread, along every control-flow path, the state after a ``tcgen05.st`` is *stored*; a
    ``tcgen05.wait::st`` turns stored into *waited*; a ``tcgen05.fence::before_thread_sync``
    turns waited (only) into clean - a fence before the wait orders nothing. Every hand-off (see
    ``_hands_tmem_off``: ``bar.*``/``barrier.*``, ``mbarrier.arrive*`` including expect_tx,
    ``tcgen05.commit``, any ``tcgen05.mma`` - a TS-MMA reads A (P) from TMEM, every MMA reads its
    D accumulator, which the correction step rewrites -, release stores/atomics, ``call``) that a
    stored or waited state can reach is reported, naming the ``tcgen05.st`` it comes from.

    This is stricter than "the next MMA with A in TMEM": any hand-off counts, since the PTX does
    not say which barrier the MMA thread waits on. Limitations: a hand-off through a relaxed
    flag (plain ``st``/``ld`` polling) is not recognised; ``call`` is reported, not followed.
    """
    hazards = []
    for name, stmts in _ptx_functions(ptx):
        state_in = _ptx_dataflow(stmts, frozenset({(_FENCED, 0)}), _st_transfer)
        for s, state in zip(stmts, state_in, strict=True):
            if s.label is not None or not _hands_tmem_off(s.opcode):
                continue
            for kind, st in sorted(e for e in state if e[0] != _FENCED):
                why = ("no tcgen05.wait::st" if kind == _STORED
                       else "tcgen05.wait::st but no tcgen05.fence::before_thread_sync after it")
                hazards.append(PtxHazard(name, s.line, s.text,
                                         f"hands off TMEM with {why} since the tcgen05.st at line {st}"))
    return hazards

"""Read a compiled kernel: disassemble the cubin, count the instructions that carry each mechanism,
read registers/stack/spills and the binary's target arch. Needs only the cubin (no GPU)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from harness.core.toolchain import cubin_ptxas

# The instructions that show a ladder mechanism, in the order a reader meets them.
MECHANISMS: tuple[tuple[str, str, str], ...] = (
    ("HMMA", r"HMMA\b", "warp-level mma.sync tensor core"),
    ("HGMMA", r"HGMMA\b", "Hopper wgmma"),
    ("HGMMA.RS", r"(?!)", "wgmma, A operand from registers"),   # counted from operands, below
    ("UTCHMMA", r"UTC\w*MMA\b", "Blackwell tcgen05.mma"),
    ("UTCHMMA.TS", r"(?!)", "tcgen05.mma, A operand from TMEM"),  # counted from operands, below
    ("UTCHMMA.2CTA", r"UTC\w*MMA\.2CTA", "tcgen05.mma.cta_group::2: one MMA over a CTA pair"),
    ("UTCBAR", r"UTCBAR\b", "tcgen05.commit to an mbarrier"),
    ("UTCBAR.2CTA", r"UTCBAR\.2CTA", "commit to the mbarriers of both CTAs of a pair"),
    ("LDTM", r"LDTM\b", "tensor memory -> registers"),
    ("STTM", r"STTM\b", "registers -> tensor memory"),
    ("UTMALDG", r"UTMALDG\b", "TMA load"),
    ("UTMALDG.2CTA", r"UTMALDG\.\w+\.2CTA", "TMA load whose bytes count on the pair leader's mbarrier"),
    ("UCGABAR", r"UCGABAR_\w+", "cluster barrier (arrive/wait)"),
    ("UTMASTG", r"UTMASTG\b", "TMA store"),
    ("SYNCS", r"SYNCS\b", "mbarrier arrive/wait"),
    ("WARPGROUP.ARRIVE", r"WARPGROUP\.ARRIVE\b", "wgmma fence"),
    ("WARPGROUP.DEPBAR", r"WARPGROUP\.DEPBAR\b", "wgmma wait"),
    ("USETMAXREG", r"USETMAXREG\b", "setmaxnreg"),
    ("VOTE", r"VOTE\b", "warp vote, per-thread predicate"),
    ("BAR", r"BAR\b", "named/CTA barrier"),
    ("BAR.ARV", r"BAR\.ARV\b", "named-barrier arrive, no wait"),
    ("LDSM", r"LDSM\b", "ldmatrix"),
    ("STSM", r"STSM\b", "stmatrix"),
    ("LDG", r"LDG\b", "per-thread global load"),
    ("LDGSTS", r"LDGSTS\b", "cp.async"),
    ("STG", r"STG\b", "per-thread global store"),
    ("LDS", r"LDS\b", "shared load"),
    ("STS", r"STS\b", "shared store"),
    ("MUFU.EX2", r"MUFU\.EX2\b", "hardware exp2"),
    ("FFMA", r"FFMA\b", "fp32 FMA"),
    ("FFMA2", r"FFMA2\b", "packed fp32 FMA (sm_100)"),
    ("SHFL", r"SHFL\b", "warp shuffle"),
    ("R2UR", r"R2UR\b", "move into a uniform register"),
    ("LDL/STL", r"(?:LDL|STL)\b", "local memory (spills)"),
)
# A mechanism matches its opcode with any suffixes: "HMMA" counts "HMMA.16816.F32.BF16".
_MECH_RE = tuple((name, re.compile(pat + r"(?:\..*)?")) for name, pat, _ in MECHANISMS)
# Mechanisms told apart by operands, not opcode: ``HGMMA.64x128x16.F32.BF16 R88, R24, gdesc[UR8]``
# reads A from registers (R24), the smem form ``HGMMA... R24, gdesc[UR8], R24`` from a descriptor.
_OPERAND_RE = {"HGMMA.RS": re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+HGMMA\.\S+\s+R\d+,\s*R\d+,\s*gdesc", re.M),
               # tcgen05.mma's SASS lists A first: gdesc[..] from smem, tmem[..] from tensor memory
               "UTCHMMA.TS": re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?UTC\w*MMA\S*\s+tmem\[", re.M)}
_INSTR_RE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", re.M)


class ToolMissing(RuntimeError):
    pass


@lru_cache(maxsize=None)
def tool(name: str) -> str:
    """nvdisasm / cuobjdump: from the pip wheels (nvidia-cuda-nvdisasm, -cuobjdump), else PATH."""
    from importlib.metadata import PackageNotFoundError, distribution
    for dist in ("nvidia-cuda-nvdisasm", "nvidia-cuda-cuobjdump"):
        try:
            for f in distribution(dist).files or ():
                if f.name == name:
                    return str(f.locate())
        except PackageNotFoundError:
            pass
    found = shutil.which(name) or (Path("/usr/local/cuda/bin") / name).as_posix()
    if not Path(found).exists():
        raise ToolMissing(f"{name} not found: pip install 'attention-ladder[sass]' (or put CUDA's bin on PATH)")
    return found


@dataclass
class Sass:
    text: str
    opcodes: Counter                     # full mnemonic -> count (e.g. 'HMMA.16816.F32.BF16': 256)
    target: str                          # e.g. 'sm_90a'
    registers: int
    local_bytes: int
    mechanisms: dict = field(default_factory=dict)   # mechanism name -> count
    ptxas: str | None = None             # the ptxas that wrote the cubin (its stamp): "13.4.59"

    @property
    def spills(self) -> int:
        return self.mechanisms.get("LDL/STL", 0) + self.local_bytes


def mechanism_counts(opcodes: Counter, text: str = "") -> dict:
    counts = {}
    for name, rx in _MECH_RE:
        counts[name] = sum(n for op, n in opcodes.items() if rx.fullmatch(op))
    for name, rx in _OPERAND_RE.items():
        counts[name] = len(rx.findall(text))
    return counts


def target_arch(sass_text: str) -> str:
    m = re.search(r"\.target\s+(sm_\w+)", sass_text)
    if m:
        return m.group(1)
    m = re.search(r"EF_CUDA_SM(\d+)\b", sass_text)
    if m:
        return f"sm_{m.group(1)}" + ("a" if "EF_CUDA_ACCELERATORS" in sass_text else "")
    return "unknown"


def machine_code_digest(cubin: bytes) -> str:
    """sha256 over the cubin's ``.text.*`` sections (the kernels' machine code), in section order: the
    same for two builds of a kernel exactly when they made the same instructions, whatever else the
    ELF file carries (paths, notes). Reads the ELF64 section headers; no tool needed."""
    import hashlib
    import struct
    if cubin[:5] != b"\x7fELF\x02":
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(h):
        start = names_at + h[0]
        return cubin[start:cubin.index(b"\0", start)].decode()

    digest = hashlib.sha256()
    for h in headers:
        if name(h).startswith(".text."):
            digest.update(name(h).encode() + b"\0" + cubin[h[4]:h[4] + h[5]])
    return digest.hexdigest()


def disassemble(cubin: Path) -> tuple[str, str]:
    """(nvdisasm's SASS text, cuobjdump's resource usage) of a cubin."""
    text = subprocess.run([tool("nvdisasm"), "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    usage = subprocess.run([tool("cuobjdump"), "--dump-resource-usage", str(cubin)],
                           capture_output=True, text=True, check=True).stdout
    return text, usage


def parse(text: str, usage: str, ptxas: str | None = None) -> Sass:
    """A Sass from the disassembly and the resource usage (``disassemble``)."""
    def field_of(key):
        m = re.search(rf"\b{key}:(\d+)", usage)
        return int(m.group(1)) if m else 0

    opcodes = Counter(_INSTR_RE.findall(text))
    return Sass(text=text, opcodes=opcodes, target=target_arch(text), registers=field_of("REG"),
                local_bytes=field_of("LOCAL"), mechanisms=mechanism_counts(opcodes, text), ptxas=ptxas)


def read_cubin(cubin: Path) -> Sass:
    return parse(*disassemble(cubin), ptxas=cubin_ptxas(Path(cubin).read_bytes()))


# wgmma matrix descriptors (PTX): bits 62-63 hold the smem layout type the tensor cores assume.
WGMMA_LAYOUT_TYPES = {0: "INTERLEAVE (no swizzle)", 1: "SWIZZLE_128B", 2: "SWIZZLE_64B", 3: "SWIZZLE_32B"}
_WGMMA_RE = re.compile(r"wgmma\.mma_async[^{]*\{[^}]*\}\s*,\s*(%rd\d+)\s*,\s*(%rd\d+)")
_WGMMA_RS_RE = re.compile(r"wgmma\.mma_async[^{]*\{[^}]*\}\s*,\s*\{[^}]*\}\s*,\s*(%rd\d+)")


def p_v_wait_window(lines: list[str]) -> tuple[int, int]:
    """(i, j) in a SASS listing of an intra-warpgroup-overlapped kernel: the first wgmma wait that
    leaves one group in flight (``WARPGROUP.DEPBAR.LE gsb0, 0x1``) and the wait for none after it
    (``0x0``). Between them the turn's P V may still run."""
    one = next(i for i, line in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line)
    zero = next(i for i in range(one, len(lines)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in lines[i])
    return one, zero


def _descriptor_immediates(ptx: str, layout_only: bool = False) -> dict[str, int]:
    """Descriptor register -> the immediate it was built with. A matrix descriptor is built as
    ``or/add REG, base, IMM``: the base is the smem address, the immediate (>= 2**32: the high half
    is never zero) everything else. A register defined more than once is left out (PTX is not
    single-assignment: which definition reaches the MMA is not read here), so it fails to resolve.
    ``layout_only``: also accept descriptors whose high half is a constant and whose low half is
    computed (their layout bits are known, their low-half fields, such as UMMA's LBO, are not)."""
    defined = re.findall(r"^\s*(?:@!?%?\w+\s+)?[\w.]+\s+(%r[d]?\d+)\s*,", ptx, flags=re.MULTILINE)
    defined += [r for pair in re.findall(r"mov\.b64\s+\{(%r\d+),\s*(%r\d+)\}", ptx) for r in pair]
    once = {reg for reg in defined if defined.count(reg) == 1}
    defs = {rd: int(imm) for rd, imm in re.findall(r"(?:or\.b64|add\.s64)\s+(%rd\d+),\s*%rd\d+,\s*(\d+);", ptx)
            if int(imm) >= 1 << 32}
    # A descriptor indexed at run time (a ring stage) is rebuilt from 32-bit halves: the low half
    # (address) changes, the high half (layout type among it) is split off a built descriptor.
    high_of = {hi: src for hi, src in re.findall(r"mov\.b64\s+\{%r\d+,\s*(%r\d+)\},\s*(%rd\d+);", ptx)}
    joined = dict(re.findall(r"mov\.b64\s+(%rd\d+),\s*\{%r\d+,\s*(%r\d+)\};", ptx))
    # ... or the high half is a constant (h12 on: the layout type among it).
    high_imm = dict(re.findall(r"mov\.b32\s+(%r\d+),\s*(\d+);", ptx))
    for rd, hi in joined.items():
        if rd not in defs and high_of.get(hi) in defs:
            defs[rd] = defs[high_of[hi]]
        elif rd not in defs and layout_only and hi in high_imm and hi in once:
            defs[rd] = int(high_imm[hi]) << 32
    # A k-block of a stage's slice: ``add.s64 REG, STAGE_DESC, OFFSET`` adds the k-block's address
    # offset to a descriptor resolved above (h08 on), so it carries that descriptor's fields.
    offsets = [(rd, src, int(off)) for rd, src, off in re.findall(r"add\.s64\s+(%rd\d+),\s*(%rd\d+),\s*(\d+);", ptx)
               if int(off) < 1 << 32]
    for _ in range(len(offsets)):
        added = {rd: defs[src] + off for rd, src, off in offsets if src in defs and defs.get(rd) != defs[src] + off}
        if not added:
            break
        defs.update(added)
    return {reg: value for reg, value in defs.items() if reg in once}


def _resolve(regs: list[str], defs: dict[str, int], what: str) -> list[int]:
    missing = [r for r in regs if r not in defs]
    if missing:
        raise ValueError(f"{what} descriptors not built from an immediate: {missing[:4]}")
    return [defs[r] for r in regs]


def wgmma_descriptor_layout_types(ptx: str) -> list[int]:
    """The layout type of every smem descriptor operand of every wgmma in ``ptx``."""
    regs = [r for pair in _WGMMA_RE.findall(ptx) for r in pair] + _WGMMA_RS_RE.findall(ptx)
    return [(imm >> 62) & 3 for imm in _resolve(regs, _descriptor_immediates(ptx, layout_only=True), "wgmma")]


# tcgen05.mma (UMMA) smem descriptors (PTX), sm_100 format: bits 16-29 the leading-dimension byte
# offset >> 4, bits 32-45 the stride byte offset >> 4, bits 46-47 the version (1), bits 61-63 the
# layout type. The address (bits 0-13) is the base register's part.
UMMA_LAYOUT_TYPES = {0: "SWIZZLE_NONE (interleave)", 1: "SWIZZLE_128B_BASE32B", 2: "SWIZZLE_128B",
                     4: "SWIZZLE_64B", 6: "SWIZZLE_32B"}
# tcgen05.mma [d_tmem], a, b_desc, idesc, ...: a is a descriptor register (A in smem) or [tmem].
_UMMA_RE = re.compile(r"tcgen05\.mma\.[^\[;]*\[[^\]]*\]\s*,\s*(%rd\d+|\[[^\]]*\])\s*,\s*(%rd\d+)")


@dataclass(frozen=True)
class UmmaDescriptor:
    operand: str              # "A" or "B"
    layout_type: int
    leading_byte_offset: int
    stride_byte_offset: int
    version: int

    @property
    def layout_name(self) -> str:
        return UMMA_LAYOUT_TYPES.get(self.layout_type, f"unknown ({self.layout_type})")


def umma_descriptors(ptx: str) -> list[UmmaDescriptor]:
    """Every smem descriptor operand of every tcgen05.mma in ``ptx``, decoded. An A operand read
    from tensor memory (a TS-MMA) has no descriptor and is left out."""
    defs = _descriptor_immediates(ptx)
    found = []
    for a, b in _UMMA_RE.findall(ptx):
        for operand, reg in (("A", a), ("B", b)):
            if reg.startswith("["):
                continue
            (imm,) = _resolve([reg], defs, "tcgen05.mma")
            found.append(UmmaDescriptor(operand, (imm >> 61) & 7, ((imm >> 16) & 0x3FFF) << 4,
                                        ((imm >> 32) & 0x3FFF) << 4, (imm >> 46) & 3))
    return found


def umma_a_from_tmem(ptx: str) -> list[bool]:
    """Per tcgen05.mma in ``ptx``: does its A operand come from tensor memory (``[%r..]``)?"""
    return [a.startswith("[") for a, _ in _UMMA_RE.findall(ptx)]


_UMMA_TMEM_RE = re.compile(r"tcgen05\.mma\.[^\[;]*\[(%r\d+)\]\s*,\s*(?:\[(%r\d+)\])?")


def umma_tmem_addresses(ptx: str) -> list[tuple[str, str | None, int]]:
    """(operand, base register, column offset) of every TMEM operand of every tcgen05.mma: the
    accumulator D, and A when it comes from TMEM. An address built as ``add.s32 %r, %base, imm``
    has that base; one that is a bare immediate (``mov.b32 %r, imm``) has base None: it assumes
    the allocation starts at TMEM address 0."""
    adds = {r: (base, int(imm)) for r, base, imm in
            re.findall(r"add\.s32\s+(%r\d+),\s*(%r\d+),\s*(-?\d+);", ptx)}
    movs = {r: int(imm) for r, imm in re.findall(r"mov\.[bu]32\s+(%r\d+),\s*(-?\d+);", ptx)}
    found = []
    for d, a in _UMMA_TMEM_RE.findall(ptx):
        for operand, reg in (("D", d), ("A", a)):
            if not reg:
                continue
            if reg in adds:
                found.append((operand, *adds[reg]))
            elif reg in movs:
                found.append((operand, None, movs[reg]))
            else:
                found.append((operand, reg, 0))          # the base register itself
    return found


def _constant_operands(ptx: str, pattern: str, what: str) -> list[int]:
    """The value of the operand ``pattern`` captures in each match in ``ptx``: an immediate, or a
    register resolved through its ``mov`` of an immediate."""
    movs = dict(re.findall(r"mov\.[bu]32\s+(%r\d+),\s*(\d+);", ptx))
    counts = []
    for operand in re.findall(pattern, ptx):
        value = operand if operand.isdigit() else movs.get(operand)
        if value is None:
            raise ValueError(f"{what} {operand} is not a constant")
        counts.append(int(value))
    return counts


def tmem_alloc_columns(ptx: str) -> list[int]:
    """The column count of every ``tcgen05.alloc`` in ``ptx`` (an immediate or a register set
    from one)."""
    return _constant_operands(ptx, r"tcgen05\.alloc[^;]*,\s*(%r\d+|\d+);", "tcgen05.alloc column count")


def expect_tx_bytes(ptx: str) -> list[int]:
    """The byte count of every ``mbarrier.arrive.expect_tx`` in ``ptx``: what each arrive tells
    the barrier to wait for. A count the TMA copies never deliver is a deadlock, visible here on a
    CPU. Register operands are resolved through their ``mov`` of an immediate."""
    return _constant_operands(ptx, r"mbarrier\.arrive\.expect_tx[^;]*,\s*(%r\d+|\d+);", "expect_tx count")


# setmaxnreg in SASS: USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xc0 (increase to 192) or
# USETMAXREG.DEALLOC.CTAPOOL 0x50 (decrease to 80). A warp's code after its setmaxnreg is its role's.
_SETMAXREG = re.compile(r"USETMAXREG\.(TRY_ALLOC|DEALLOC)\S*\s+(?:U?P\w+,\s*)?(0x[0-9a-f]+|\d+)")
ROLE_OPCODES = ("STL", "LDL", "LDTM", "STTM", "MUFU.EX2", "UTCHMMA", "VOTE", "BAR.SYNC", "BAR.ARV")


@dataclass(frozen=True)
class RegisterRegion:
    """The SASS from one setmaxnreg to the next (or to the last EXIT): one role's code in a kernel
    whose roles each start with their own setmaxnreg (region 0, ``registers`` None, is the code
    before). ``out_of_line``: the code ptxas places after the kernel's last EXIT (the retry loops
    of mbarrier waits, subroutines), reached by branches from every role's code: no one role's."""
    registers: int | None
    lines: tuple[str, ...]
    out_of_line: bool = False

    def count(self, opcode: str) -> int:
        """Instructions whose opcode is ``opcode`` or starts with ``opcode.``."""
        pattern = re.compile(rf"(?:^|[\s;}}])(?:@!?U?P\w+\s+)?{re.escape(opcode)}(?:\.\S*)?\s")
        return sum(bool(pattern.search(line)) for line in self.lines)


_EXIT = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+EXIT\s*;")


def register_regions(sass_text: str) -> list[RegisterRegion]:
    """Split a kernel's SASS at every USETMAXREG, in address order; what follows the last
    unpredicated EXIT is a last, out-of-line region."""
    lines = sass_text.splitlines()
    exits = [i for i, line in enumerate(lines) if _EXIT.search(line)]
    end = exits[-1] + 1 if exits else len(lines)
    regions, registers, current = [], None, []
    for line in lines[:end]:
        m = _SETMAXREG.search(line)
        if m:
            regions.append(RegisterRegion(registers, tuple(current)))
            registers, current = int(m.group(2), 0), []
        current.append(line)
    regions.append(RegisterRegion(registers, tuple(current)))
    if end < len(lines):
        regions.append(RegisterRegion(None, tuple(lines[end:]), out_of_line=True))
    return regions

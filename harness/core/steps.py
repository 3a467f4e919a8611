"""Find the ladder's steps by file name; dropping a new file in adds a step.

    ladder/s01_<slug>.py             step 01, shared by both tracks (aliases b01, h01)
    ladder/hopper/hNN_<slug>.py      Hopper track
    ladder/blackwell/bNN_<slug>.py   Blackwell track
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import re
from dataclasses import dataclass
from functools import cache, cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from harness.core import experiments
from harness.core.paths import LADDER, ROOT

TRACK_PREFIX = {"hopper": "h", "blackwell": "b"}    # hNN / bNN; step 01 belongs to both tracks
TRACKS = tuple(TRACK_PREFIX)
_PATTERNS = ((LADDER, re.compile(r"^s(\d\d)_(\w+)\.py$"), ""),
             *((LADDER / track, re.compile(rf"^{prefix}(\d\d)_(\w+)\.py$"), prefix)
               for track, prefix in TRACK_PREFIX.items()))
CONTRACT = LADDER / "contract.py"     # shapes every kernel (aligned, runtime_tensor): part of each fingerprint


@dataclass(frozen=True)
class Step:
    id: str          # "01", "h02", "b02"; for a variant file, its file stem
    number: int
    slug: str
    path: Path
    variant: bool = False   # a step file outside the ladder: run it, never record it as a step
    experiment: str | None = None   # the harness.core.experiments name this variant was built from

    @property
    def spec(self) -> str:
        """What resolve() needs to find this step again (in a child process): its id, its
        experiment name, or a variant's path."""
        if self.experiment:
            return f"exp:{self.experiment}"
        return str(self.path) if self.variant else self.id

    @property
    def module_name(self) -> str:
        rel = self.path.relative_to(ROOT).with_suffix("")
        return ".".join(rel.parts)

    @property
    def track(self) -> str | None:
        """The track this step belongs to alone; None for step 01 (both tracks)."""
        return next((track for track, prefix in TRACK_PREFIX.items() if self.id.startswith(prefix)), None)

    @property
    def tracks(self) -> tuple[str, ...]:
        return (self.track,) if self.track else TRACKS

    @cached_property
    def module(self):
        if self.variant:
            name = "ladder_variant_" + re.sub(r"\W", "_", self.id)
            spec = importlib.util.spec_from_file_location(name, self.path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(self.module_name)

    @property
    def code_sha256(self) -> str:
        """Hash of the step file's code: a recorded result names the version of the kernel it
        measured. Docstrings are dropped and comments never reach the syntax tree, so editing
        the prose around a kernel does not make its results stale; editing the code does."""
        return code_sha256(self.path.read_text())

    @property
    def fingerprint(self) -> dict:
        """What a recorded result depends on besides the GPU: the step's code, the contract's
        code (input checks and the tensor types every kernel is compiled for) and the CuTe DSL
        release. A result whose fingerprint differs from this one measured another kernel."""
        return {"step": self.code_sha256, "contract": contract_sha256(), "cutlass_dsl": cutlass_dsl_version()}

    @property
    def info(self):
        return self.module.INFO

    @property
    def writeup(self) -> Path:
        name = f"{self.number:02d}-{self.slug.replace('_', '-')}.md"
        return ROOT / "writeups" / (self.track or "") / name


@cache
def code_sha256(source: str) -> str:
    """sha256 of a Python source's syntax tree without docstrings and without the model facts
    of its StepInfo (``extra`` keys in MODEL_KEYS; see Step.code_sha256).

    The tree is written out by ``_canonical`` rather than ``ast.dump``: Python 3.12 added fields
    (``type_params``) that ``ast.dump`` prints even when empty, so the same file hashed differently
    on this machine (3.11) and on the GPU machine (3.12)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        _drop_model_facts(node)
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()


# Keys of a StepInfo's ``extra`` that describe the kernel to a model and are not read by the code
# that runs it: editing them does not make a recorded measurement stale.
MODEL_KEYS = ("bound", "softmax_peeled")


def _drop_model_facts(node) -> None:
    """In ``extra={...}`` of a call (StepInfo's), drop the MODEL_KEYS entries."""
    if not isinstance(node, ast.Call):
        return
    for kw in list(node.keywords):
        if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
            pairs = [(k, v) for k, v in zip(kw.value.keys, kw.value.values, strict=True)
                     if not (isinstance(k, ast.Constant) and k.value in MODEL_KEYS)]
            kw.value.keys, kw.value.values = [k for k, _ in pairs], [v for _, v in pairs]
            if not pairs and len(kw.value.keys) == 0:
                node.keywords.remove(kw)      # an extra that held only model facts: as if absent


@cache
def contract_sha256() -> str:
    return code_sha256(CONTRACT.read_text())


@cache
def cutlass_dsl_version() -> str | None:
    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:
        return None


def _canonical(node) -> str:
    """A syntax tree as text, leaving out fields that are None or empty (the ones Python
    versions add or drop), so the text depends on the code and not on the interpreter."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name in node._fields
                  if (value := getattr(node, name, None)) is not None and not (isinstance(value, list) and not value)]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_canonical(item) for item in node) + "]"
    return repr(node)


def discover() -> list[Step]:
    found = []
    for folder, pattern, prefix in _PATTERNS:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            m = pattern.match(path.name)
            if m:
                found.append(Step(id=prefix + m.group(1), number=int(m.group(1)), slug=m.group(2), path=path))
    return sorted(found, key=lambda s: (s.number, s.id))


def track_steps(track: str | None = None) -> list[Step]:
    """Steps in ladder order; with a track, that track's climb (01 first)."""
    steps = discover()
    if track is None:
        return steps
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; choose one of {', '.join(TRACKS)}")
    return [s for s in steps if track in s.tracks]


def variant(path: str | Path, experiment: str | None = None) -> Step:
    """A step file anywhere (say, your own change to h05): same contract, measured the same way,
    compared with the step it names as its predecessor; never recorded as a ladder row."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ValueError(f"no step file {path}")
    step_id = experiment or path.stem
    step = Step(id=step_id, number=-1, slug=path.stem, path=path, variant=True)
    info = step.info
    return Step(id=step_id, number=int(re.sub(r"\D", "", info.id) or 0), slug=info.slug, path=path,
                variant=True, experiment=experiment)


def resolve(name: str) -> Step:
    """'01', '1', 'b01', 'h01', 's01', 'h02', 'b5' ... -> Step; a path ending in .py -> a variant;
    'exp:<name>' -> the experiment of that name (harness/core/experiments.py), built and loaded."""
    if name.strip().endswith(".py"):
        return variant(name.strip())
    if name.strip().startswith(experiments.PREFIX):
        exp = experiments.get(name.strip())
        return variant(experiments.materialize(exp, resolve(exp.base).path), experiment=exp.name)
    key = name.strip().lower()
    m = re.fullmatch(r"([shb]?)0*(\d+)", key)
    if not m:
        raise ValueError(f"not a step name: {name!r} (try 01, h02, b02)")
    prefix, number = m.group(1), int(m.group(2))
    for step in discover():
        if step.number != number:
            continue
        if step.id[0].isdigit() and prefix in ("", "s", *TRACK_PREFIX.values()):
            return step
        if step.id[0] == prefix:
            return step
    raise ValueError(f"no step {name!r}; known: {', '.join(s.id for s in discover())}")


def predecessor(step: Step) -> Step | None:
    pred = step.info.predecessor
    return resolve(pred) if pred else None

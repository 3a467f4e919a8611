"""A measured or simulated timeline record, read: one lane per warp role, each phase's median
cycles, the period of a K/V tile, how much of the time a GEMM is in flight.

A record (``harness.gpu.timeline_run.measure`` on a GPU, ``harness.timeline.simulate`` on any
machine) holds the phase names and, per warp that recorded anything, its intervals
``[tile, phase, begin, end]`` in cycles from the earliest probe.
"""

from __future__ import annotations

from harness.core.markers import phase_kind

KEPT_TILES = 16           # tiles per warp kept in the record (the steady state starts after a few)


def role_of(module, warp: int, phases=()) -> str:
    """A warp's role: the step's own constant naming it (MMA_WARP = 8: "mma warp"), else its
    warpgroup by what it does (the phases it ran)."""
    for k, v in vars(module).items():
        if k.endswith("_WARP") and isinstance(v, int) and not isinstance(v, bool) and v == warp:
            return f"{k.removesuffix('_WARP').lower()} warp"
    kind = ("consumer" if "QK^T" in phases else "softmax" if "softmax" in phases
            else "producer" if any("slot wait" in p for p in phases) else "")
    return f"{kind} warpgroup {warp // 4}".strip()


def reduce(module, names: list[str], raw) -> dict:
    """Raw (warp, tile, phase, edge) cycle counts -> per role (its lowest warp that recorded
    anything: the warps of a warpgroup run in step), the role's name and its intervals
    [tile, phase, begin, end] over the first KEPT_TILES tiles, in cycles from the earliest probe;
    a phase a warp began must have ended, on every tile it ran."""
    stamps = [c for warp in raw for tile in warp for phase in tile for c in phase if c]
    if not stamps:
        raise ValueError("no probe fired: the sampled block recorded nothing")
    origin = min(stamps)
    warps = []
    for w, tiles in enumerate(raw):
        intervals = []
        for j, phases in enumerate(tiles[:KEPT_TILES]):
            for p, (b, e) in enumerate(phases):
                if bool(b) != bool(e):
                    raise ValueError(f"warp {w} tile {j}: phase {names[p]!r} has a begin or an end, not both")
                if b and e < b:
                    raise ValueError(f"warp {w} tile {j}: phase {names[p]!r} ends before it begins")
                if b:
                    intervals.append([j, p, b - origin, e - origin])
        if intervals:
            ran = {names[p] for _, p, _, _ in intervals}
            warps.append({"warp": w, "role": role_of(module, w, ran), "intervals": intervals})
    return {"phases": names, "warps": lanes({"warps": warps})}


def lanes(record: dict) -> list[dict]:
    """One warp per role: the lowest warp of each warpgroup or named role."""
    kept, seen = [], set()
    for w in record["warps"]:
        if w["role"] not in seen:
            seen.add(w["role"])
            kept.append(w)
    return kept


def phase_medians(record: dict) -> dict[str, dict[str, float]]:
    """Lane label -> phase -> median cycles over the tiles after the first two."""
    import statistics
    names, out = record["phases"], {}
    for lane in lanes(record):
        spans: dict[str, list[int]] = {}
        for tile, p, b, e in lane["intervals"]:
            if tile >= 2:
                spans.setdefault(names[p], []).append(e - b)
        out[f"{lane['role']} (warp {lane['warp']})"] = {n: statistics.median(v) for n, v in spans.items()}
    return out


def gemm_in_flight(record: dict) -> float | None:
    """The share of time, from the first to the last GEMM of tiles 2 to KEPT_TILES - 3, during
    which at least one GEMM was in flight: on Hopper a consumer's QK^T or PV phase (issue to
    wait_group), in a simulation the tensor pipe's own lane. None for a measured Blackwell record,
    whose MMA-warp phases are issue only."""
    if record.get("tensor"):
        spans = [(b, e) for tile, _, b, e in record["tensor"] if 2 <= tile < KEPT_TILES - 2]
    elif any("mma warp" in lane["role"] for lane in record["warps"]):
        return None
    else:
        spans = [(b, e) for lane in record["warps"] for tile, p, b, e in lane["intervals"]
                 if phase_kind(record["phases"][p]) in ("qk", "pv") and 2 <= tile < KEPT_TILES - 2]
    if not spans:
        return None
    spans.sort()
    covered, (lo, hi) = 0, spans[0]
    start = lo
    for b, e in spans[1:]:
        if b > hi:
            covered += hi - lo
            lo, hi = b, e
        else:
            hi = max(hi, e)
    covered += hi - lo
    return covered / (hi - start)


def period(record: dict, phase: str | None = None) -> float | None:
    """Median cycles between successive begins of ``phase`` (default: the first phase a consumer
    runs every tile) on the first lane that runs it, over the tiles after the first two."""
    import statistics
    names = record["phases"]
    for lane in lanes(record):
        by_phase: dict[int, list[int]] = {}
        for tile, p, b, _ in lane["intervals"]:
            by_phase.setdefault(p, []).append((tile, b))
        candidates = [names.index(phase)] if phase else sorted(by_phase)
        for p in candidates:
            starts = [b for tile, b in sorted(by_phase.get(p, [])) if tile >= 2]
            if len(starts) >= 3:
                return statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))
    return None

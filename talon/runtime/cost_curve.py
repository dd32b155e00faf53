"""The device's cost curve: what the pieces of a decoding step cost here, in units of one plain
decoding step, so a tree's price can be read off before it is verified.

A step of a tree with ``n`` nodes (root included) drafted in calls over frontiers of widths ``w_1 ..
w_k`` (the root call is width 1) costs

    price = 1 + (verify(n) - verify(1) + root + call(w_2) + sum_{i>2} later(w_i) + k builder
                 + observe [n > 1]) / plain

in plain steps, where ``plain`` is the wall clock of one step of plain decoding through the real loop
(so a plain step costs exactly 1, its loop overhead included), ``verify(n)`` the target's tree forward,
LM head on the internal rows and walk, ``root`` the step's first drafter call (the drafter catching up
with the tokens the last step committed, then proposing after the root), ``call(w)`` the step's second
call, over ``w`` frontier nodes, with its answer's top choices read back, ``later(w)`` a call after that
(the drafter's weights are still in the caches from the calls before it: on the 2-core AMX Xeon a
head's one-node call cost 2.4 ms as a step's second call and 1.7-2.0 ms as its third or fourth, after
a verification had passed 540 MB of the target's weights through the caches), ``builder`` the tree builder's own
work per call (choosing, gating and sizing from the answer: host work, a tenth of a plain step per call
on a GPU), and ``observe`` what a drafted step's bookkeeping adds (the drafter and the calibration
reading the verdict).  A curve without a measured ``root`` prices the first call as ``call(1)``; one
without ``later`` prices every call after the first as ``call``; one without ``builder`` or ``observe``
prices them at 0.  Measured points are interpolated linearly and
extrapolated from the last two (never downward).

A curve belongs to one target, drafter, dtype, device, thread count and kernel setting; ``CurveKey``
names them, and ``cached_curve`` / ``store_curve`` keep curves next to the model cache
(``$TALON_CACHE_DIR/cost-curves``) so each is measured once (``talon.engine.cost_measure``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..files import write_text_atomically
from ..models.device import QUIET_SHARE
from ..models.embedded import cache_root

CURVE_FORMAT = 1
CURVES_DIR = "cost-curves"


@dataclass(frozen=True)
class CurveKey:
    """What a cost curve depends on."""

    target: str  # the target's identity (resolved directory or Hub id)
    drafter: str  # the drafter's display name
    dtype: str
    device: str  # e.g. "cpu" or "cuda (NVIDIA H100 80GB HBM3)"
    threads: int
    kernels: str  # CPU linears (mode, rows MKL takes), static forwards, attention, LM head
    torch: str
    method: str = ""  # how it was measured (a curve measured another way is measured again)
    cpu: str = ""  # the CPU's identity (a VM moved to another host measures again)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def _interpolate(points: Sequence[tuple[int, float]], x: float) -> float:
    """Linear between measured points, constant below the first, extrapolated past the last two (never
    downward: two noisy last points must not make a bigger tree look cheaper)."""
    if not points:
        return 0.0
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if len(points) == 1:
        return points[0][1]
    (x0, y0), (x1, y1) = points[-2:]
    return y1 + max(y1 - y0, 0.0) * (x - x1) / (x1 - x0)


@dataclass(frozen=True)
class CostCurve:
    """Measured step pieces, in seconds, and the step price they give.

    Attributes:
        plain: seconds of one plain decoding step through the loop (the unit of every price).
        verify: ``(nodes incl. root, seconds)`` of verifying trees of that size, by size.
        call: ``(frontier width, seconds)`` of a step's second drafter call, by width (empty for plain
            decoding).
        later: ``(frontier width, seconds)`` of a drafter call after the second, by width (empty: priced
            as ``call``).
        root: seconds of a step's first drafter call after a step that committed
            ``talon.engine.cost_measure.ROOT_TOKENS`` tokens (0: not measured, priced as ``call(1)``).
        observe: seconds a drafted step's bookkeeping adds to a plain step's (0: not measured).
        builder: seconds of the tree builder's own work per drafter call (0: not measured): the device's
            default method's builder.
        builders: ``(method, seconds)`` of other methods' builders where measured (EAGLE-2's ranks its
            whole frontier, more work than TALON's); ``for_method`` prices a method's steps with its own.
        key: what the curve was measured for (``CurveKey`` as a dict).
        measured: when (ISO time), and ``note`` how (command or "measured on first use").
        other_share: the share of the machine's CPU other processes (and steal) took while it was
            measured (``talon.models.device.OtherWork``; None: not known).
    """

    plain: float
    verify: tuple[tuple[int, float], ...]
    call: tuple[tuple[int, float], ...] = ()
    later: tuple[tuple[int, float], ...] = ()
    root: float = 0.0
    observe: float = 0.0
    builder: float = 0.0
    builders: tuple[tuple[str, float], ...] = ()
    key: dict = field(default_factory=dict)
    measured: str = ""
    note: str = ""
    other_share: float | None = None

    def for_method(self, method: str) -> CostCurve:
        """The curve with ``method``'s own builder work per call where it was measured (else as it is)."""
        own = dict(self.builders).get(method)
        return self if own is None else replace(self, builder=own)

    def verify_seconds(self, nodes: int) -> float:
        return _interpolate(self.verify, nodes)

    def call_seconds(self, width: int) -> float:
        return _interpolate(self.call, width)

    def later_seconds(self, width: int) -> float:
        return _interpolate(self.later or self.call, width)

    def verify_ratio(self, nodes: int) -> float:
        """Verifying ``nodes`` nodes (root included), in plain steps."""
        return self.verify_seconds(nodes) / self.plain

    def price(self, nodes: int, call_widths: Sequence[int]) -> float:
        """A step with a tree of ``nodes`` nodes (root included) drafted in calls of these widths, the
        first of them the step's first call, in plain steps."""
        extra = self.verify_seconds(nodes) - self.verify_seconds(1)
        if call_widths:
            first = self.root or self.call_seconds(call_widths[0])
            extra += first + sum(self.call_seconds(w) for w in call_widths[1:2])
            extra += sum(self.later_seconds(w) for w in call_widths[2:]) + len(call_widths) * self.builder
        if nodes > 1:
            extra += self.observe
        return 1.0 + extra / self.plain

    def to_dict(self) -> dict:
        """JSON-ready (lists, not tuples, so a round trip through JSON gives an equal dict)."""
        d = asdict(self)
        d["verify"] = [list(p) for p in self.verify]
        d["call"] = [list(p) for p in self.call]
        d["later"] = [list(p) for p in self.later]
        d["builders"] = [list(p) for p in self.builders]
        return {"format": CURVE_FORMAT, **d}

    @classmethod
    def from_dict(cls, d: dict) -> CostCurve:
        """The curve ``to_dict`` wrote; ``ValueError`` for anything that is not one a price can be read
        from (another format, a plain step that is not a positive number of seconds, no verify point,
        sizes not increasing, times not finite and non-negative)."""
        if not isinstance(d, dict) or d.get("format") != CURVE_FORMAT:
            raise ValueError(f"not a cost curve of format {CURVE_FORMAT}")
        plain = float(d["plain"])
        if not (math.isfinite(plain) and plain > 0):
            raise ValueError(f"a cost curve's plain step must be a positive number of seconds, not {plain}")
        return cls(
            plain=plain,
            verify=_points(d["verify"], "verify", need=True),
            call=_points(d.get("call", ()), "call"),
            later=_points(d.get("later", ()), "later"),
            root=_seconds(d.get("root", 0.0), "root"),
            observe=_seconds(d.get("observe", 0.0), "observe"),
            builder=_seconds(d.get("builder", 0.0), "builder"),
            builders=tuple((str(m), _seconds(t, "builder")) for m, t in d.get("builders", ())),
            key=dict(d.get("key", {})),
            measured=str(d.get("measured", "")),
            note=str(d.get("note", "")),
            other_share=_share(d.get("other_share")),
        )

    @property
    def busy(self) -> bool:
        """Whether it was measured while other processes took a known share of the machine at or over
        ``QUIET_SHARE`` (its prices are then higher than a quiet machine's)."""
        return self.other_share is not None and self.other_share >= QUIET_SHARE


def _share(value) -> float | None:
    """A stored ``other_share``: a fraction in [0, 1], else None (not known)."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        return None
    return share if 0.0 <= share <= 1.0 else None


def _seconds(value, name: str) -> float:
    """A stored piece's seconds, checked finite and non-negative."""
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"a cost curve's {name} time must be finite and non-negative, not {seconds}")
    return seconds


def _points(rows, name: str, need: bool = False) -> tuple[tuple[int, float], ...]:
    """``(size, seconds)`` pairs of a stored curve, checked: sizes from 1 up, strictly increasing (the
    interpolation divides by their gaps), times finite and non-negative."""
    points = tuple((int(n), float(t)) for n, t in rows)
    sizes = [n for n, _ in points]
    if (need and not points) or any(n < 1 for n in sizes) or sizes != sorted(set(sizes)):
        raise ValueError(f"a cost curve's {name} sizes must be increasing whole numbers from 1, not {sizes}")
    if not all(math.isfinite(t) and t >= 0 for _, t in points):
        raise ValueError(f"a cost curve's {name} times must be finite and non-negative")
    return points


def curve_path(key: CurveKey, root: Path | None = None) -> Path:
    """Where the curve of ``key`` is cached."""
    return (root or cache_root()) / CURVES_DIR / f"{key.digest()}.json"


def cached_curve(key: CurveKey, root: Path | None = None) -> CostCurve | None:
    """The cached curve of ``key``, or None (missing, unreadable, or measured for another key)."""
    path = curve_path(key, root)
    try:
        curve = CostCurve.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return curve if curve.key == asdict(key) else None


def store_curve(curve: CostCurve, key: CurveKey, root: Path | None = None) -> Path:
    """Write ``curve`` to the cache (atomically: a reader never sees half a file, and two processes
    storing the same key each write their own temporary file)."""
    return write_text_atomically(curve_path(key, root), json.dumps(curve.to_dict(), indent=1))

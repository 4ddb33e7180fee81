"""What ran where: primitives per backend, segments, bytes that crossed between backends, eager JAX calls.

`tinyjax.report()` covers the whole process; `tinyjax.explain(f)(*args)` (tinyjax.transforms) covers one call of `f`.
The flush (tinyjax.core.pending) records here; nothing here runs anything.
"""
import collections
import contextlib
import dataclasses


@dataclasses.dataclass
class Report:
  primitives: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (backend, prim)
  segments: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # backend -> count
  bytes_crossed: int = 0
  flushes: int = 0
  compiles: int = 0
  eager: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # fn -> calls
  choices: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> runs

  @property
  def native_share(self) -> tuple[int, int]:
    """(equation runs on the native backend, all equation runs): what ran outside XLA."""
    return sum(n for (b, _), n in self.primitives.items() if b != "xla"), sum(self.primitives.values())

  @property
  def fallback_primitives(self) -> dict[str, int]:
    return {p: n for (b, p), n in self.primitives.items() if b == "xla"}

  def __str__(self):
    lines = [f"tinyjax report: {self.flushes} flushes, {self.compiles} programs compiled, "
             f"{sum(self.segments.values())} segments "
             f"({', '.join(f'{n} {b}' for b, n in sorted(self.segments.items())) or 'none'}), "
             f"{self.bytes_crossed} bytes crossed between backends"]
    backends = sorted({b for b, _ in self.primitives})
    if backends:
      width = max(len(p) for _, p in self.primitives) + 2
      lines.append("  " + "primitive".ljust(width) + "".join(b.rjust(10) for b in backends))
      for prim in sorted({p for _, p in self.primitives}):
        lines.append("  " + prim.ljust(width) + "".join(str(self.primitives[b, prim]).rjust(10) for b in backends))
    for reason, runs in sorted(self.choices.items()):
      lines.append(f"{reason}: {runs} runs")
    native, total = self.native_share
    if total:
      lines.append(f"{native} of {total} equation runs native ({100 * native / total:.1f}%), the rest on XLA")
    if self.eager:
      lines.append("run eagerly by JAX (they need concrete values): "
                   + ", ".join(f"{fn} x{n}" for fn, n in sorted(self.eager.items())))
    return "\n".join(lines)


_process = Report()
_scopes: list[Report] = []


def _reports():
  return [_process, *_scopes]


def record_run(placement) -> None:
  """Count one run of a program that executed as `placement` (an ir.backend.Placement) says."""
  for report in _reports():
    report.flushes += 1
    report.primitives.update(placement.counts)
    report.segments.update(placement.segments)
    report.bytes_crossed += placement.bytes_crossed
    if placement.reason:
      report.choices[placement.reason] += 1


def record_compile() -> None:
  for report in _reports():
    report.compiles += 1


def record_eager(name: str) -> None:
  for report in _reports():
    report.eager[name] += 1


def report() -> Report:
  """What ran where since the process started (or since `reset()`)."""
  return _process


def reset() -> None:
  global _process
  _process = Report()


@contextlib.contextmanager
def collecting():
  scope = Report()
  _scopes.append(scope)
  try:
    yield scope
  finally:
    _scopes.remove(scope)

"""What ran where: primitives per backend, segments, bytes that crossed between backends, eager JAX calls.

`tinyjax.report()` covers the whole process; `tinyjax.explain(f)(*args)` (tinyjax.transforms) covers one call of `f`.
The flush (tinyjax.core.pending) records here; nothing here runs anything.
"""
import collections
import contextlib
import dataclasses


_RUNS_KEPT = 256


@dataclasses.dataclass
class Report:
  _primitives: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (backend, prim)
  _segments: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # backend -> count
  _bytes_crossed: int = 0
  _flushes: int = 0
  compiles: int = 0
  eager: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # fn -> calls
  runs_by_jax: int = 0  # the equation runs of those calls (in the XLA column and the native share's total)
  _choices: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> runs
  copies: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # why not split -> arrays
  # NB: a run is counted by its placement, and the counts above are brought up to date when read: adding a
  # placement's counters at every run cost 2 us of a jitted call's dispatch. id(placement) -> [placement, runs]
  _runs: dict = dataclasses.field(default_factory=dict)

  def record(self, placement, runs: int = 1) -> None:
    entry = self._runs.get(id(placement))
    if entry is None:
      self._runs[id(placement)] = [placement, runs]  # NB: the entry holds the placement: its id is not reused
      if len(self._runs) > _RUNS_KEPT:  # auto's placements are new at each run: counted now and then, not kept
        self._counted()
    else:
      entry[1] += runs

  def _counted(self) -> "Report":
    runs, self._runs = self._runs, {}
    for placement, n in runs.values():
      self._flushes += n
      for key, count in placement.counts.items():
        self._primitives[key] += count * n
      for backend in placement.segments:
        self._segments[backend] += n
      self._bytes_crossed += placement.bytes_crossed * n
      if placement.reason:
        self._choices[placement.reason] += n
    return self

  primitives = property(lambda self: self._counted()._primitives)
  segments = property(lambda self: self._counted()._segments)
  bytes_crossed = property(lambda self: self._counted()._bytes_crossed)
  flushes = property(lambda self: self._counted()._flushes)
  choices = property(lambda self: self._counted()._choices)

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
    for reason, arrays in sorted(self.copies.items()):
      lines.append(f"{reason}: {arrays} arrays")
    native, total = self.native_share
    if total:
      lines.append(f"{native} of {total} equation runs native ({100 * native / total:.1f}%), the rest on XLA")
    if self.eager:
      lines.append("run by JAX itself (they need concrete values, or values only JAX holds; docs/guarantees.md): "
                   + ", ".join(f"{fn} x{n}" for fn, n in sorted(self.eager.items())))
    return "\n".join(lines)


_process = Report()
_scopes: list[Report] = []


def _reports():
  return [_process, *_scopes]


def record_run(placement, runs: int = 1) -> None:
  """Count runs of a program that executed as `placement` (an ir.backend.Placement) says."""
  _process.record(placement, runs)
  for scope in _scopes:
    scope.record(placement, runs)


def record_compile() -> None:
  for report in _reports():
    report.compiles += 1


def record_copy(reason: str) -> None:
  """An array placed on a mesh as a copy on each of its devices, where JAX splits it: why."""
  for report in _reports():
    report.copies[reason] += 1


def record_eager(name: str, primitives: list[str]) -> None:
  """A call JAX ran itself, and the primitives it ran: they count as equation runs on XLA."""
  for report in _reports():
    report.eager[name] += 1
    report.runs_by_jax += len(primitives)
    report._primitives.update(("xla", p) for p in primitives)


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

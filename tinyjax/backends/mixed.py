"""Partition a Program into segments: maximal runs of equations the native backend supports, and runs it
does not (which XLA runs). Data crosses between backends only at segment boundaries."""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Segment:
  native: bool
  eqns: tuple
  inputs: tuple[int, ...]  # slots the segment reads that earlier segments (or the program inputs) wrote
  outputs: tuple[int, ...]  # slots the segment writes that later segments or the program outputs read


def partition(program, supports) -> list[Segment]:
  runs: list[tuple[bool, list]] = []
  for eqn in program.eqns:
    native = supports(eqn)
    if runs and runs[-1][0] == native:
      runs[-1][1].append(eqn)
    else:
      runs.append((native, [eqn]))
  read_later: set[int] = {a for a in program.outputs if isinstance(a, int)}
  segments = []
  for native, eqns in reversed(runs):
    written = {s for e in eqns for s in e.outputs}
    read = {a for e in eqns for a in e.inputs if isinstance(a, int)}
    segments.append(Segment(native, tuple(eqns), tuple(sorted(read - written)), tuple(sorted(written & read_later))))
    read_later = (read_later - written) | (read - written)
  return segments[::-1]


def crossing_bytes(segment: Segment, avals: dict[int, object]) -> int:
  """Bytes a fallback segment moves: its inputs in and its outputs out."""
  return sum(int(np.prod(avals[s].shape, dtype=np.int64)) * avals[s].dtype.itemsize
             for s in segment.inputs + segment.outputs)

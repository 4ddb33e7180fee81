"""A profile being recorded: what tinyjax and tinygrad did and when, written as Chrome's trace-event JSON (open it in
https://ui.perfetto.dev or chrome://tracing).

Every layer records into the one `Recording` in effect, `active` (None when no profile is being recorded: the places
that record check that name and nothing else, so that nothing is timed otherwise). A backend that times work of its
own only while a profile records (the tinygrad backend's kernels) registers an `instrument`, started with each
recording and ended with it. `tinyjax.profile(path)` (tinyjax/profiling.py) starts and ends a recording.

A trace has one row per Python thread that ran tinyjax (its programs compiled and run, on which backend, and their
XLA segments) and one row per device (each kernel's compile, its load by the runtime and its runs; the transfers in
and out). Times are microseconds since the recording started.
"""
import contextlib
import gzip
import json
import os
import threading
import time
from typing import Callable

active: "Recording | None" = None
# start(recording) -> the function that ends it: what a backend times only while a profile records
_instruments: list[Callable[["Recording"], Callable[[], None]]] = []

_THREAD, _DEVICE = "thread", "device"  # the kinds of rows, threads first


class Recording:
  """The events of one profile: (row, name, category, start, end, args), times from time.perf_counter_ns."""

  def __init__(self):
    self.started = time.perf_counter_ns()
    self.events: list[tuple] = []  # NB: list.append is atomic: threads record without a lock
    self.ends: list[Callable[[], None]] = []  # of the instruments started with this recording

  def add(self, row: tuple[str, str], name: str, category: str, start: int, end: int, **args) -> None:
    self.events.append((row, name, category, start, end, args))

  def on_device(self, device: str, name: str, category: str, start: int, end: int, **args) -> None:
    """An event on a device's row (`device` as the trace names it: "CPU", "CL", "XLA cpu:0")."""
    self.add((_DEVICE, device), name, category, start, end, device=device, **args)

  def transfer(self, device: str, direction: str, start: int, host) -> None:
    """A put or get of the host array `host` on a device's row, from `start` until now."""
    self.on_device(device, direction, "transfer", start, time.perf_counter_ns(), bytes=host.nbytes,
                   shape=list(host.shape), dtype=str(host.dtype))

  @contextlib.contextmanager
  def span(self, name: str, category: str, **args):
    """The time the block takes, on the calling thread's row (also when it raises)."""
    start = time.perf_counter_ns()
    try:
      yield
    finally:
      self.add((_THREAD, threading.current_thread().name), name, category, start, time.perf_counter_ns(), **args)

  def trace(self) -> dict:
    """The events as Chrome's trace-event JSON: complete events ("X") on rows named by metadata events ("M")."""
    pid = os.getpid()
    rows = sorted({row for row, *_ in self.events}, key=lambda row: (row[0] != _THREAD, row[1]))
    tid = {row: i + 1 for i, row in enumerate(rows)}
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "tinyjax"}}]
    for row in rows:
      label = f"tinyjax ({row[1]})" if row[0] == _THREAD else row[1]
      events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid[row], "args": {"name": label}})
      events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid[row],
                     "args": {"sort_index": tid[row]}})
    for row, name, category, start, end, args in self.events:
      events.append({"name": name, "cat": category, "ph": "X", "ts": (start - self.started) / 1e3,
                     "dur": (end - start) / 1e3, "pid": pid, "tid": tid[row], "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms"}

  def write(self, path: str) -> None:
    """The trace to `path` (gzipped if it ends in .gz, as Perfetto and chrome://tracing also read it)."""
    text = json.dumps(self.trace())
    with (gzip.open if str(path).endswith(".gz") else open)(path, "wt") as file:
      file.write(text)


def spanned(name: str, category: str, **args):
  """The block as a span of the calling thread's row while a profile records (a no-op otherwise). NB: for what runs
  seldom (a compile); a hot path checks `active` itself, which is all it pays when no profile records."""
  return contextlib.nullcontext() if active is None else active.span(name, category, **args)


def instrument(start: Callable[[Recording], Callable[[], None]]) -> None:
  """Have `start(recording)` called when each recording starts (now, if one is on); it returns what ends it."""
  _instruments.append(start)
  if active is not None:
    active.ends.append(start(active))


def start() -> Recording:
  """Start recording a profile. NB: as JAX's profiler, one at a time."""
  global active
  if active is not None:
    raise RuntimeError("a profile is being recorded already: only one profile may be recorded at a time")
  recording = Recording()
  recording.ends = [start_instrument(recording) for start_instrument in _instruments]
  active = recording
  return recording


def stop() -> Recording:
  """Stop recording the profile in effect; returns it."""
  global active
  recording, active = active, None
  if recording is None:
    raise RuntimeError("no profile is being recorded")
  for end in reversed(recording.ends):
    end()
  return recording

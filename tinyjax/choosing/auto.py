"""TINYJAX_BACKEND=auto: each flushed program runs on the backend measured faster for it.

The first time a program (a structure of equations on given shapes and dtypes) is flushed, it runs on tinygrad (as
the tinygrad backend plans it: native segments, XLA for what has no rule) and on XLA, each until its compiled form
is warm, and the faster steady-state run wins. The choice and both times are remembered on disk
(TINYJAX_AUTO_CACHE), so later processes skip the trial. `tinyjax.report()` says which backend ran each program and
why.

A program takes and makes buffers of the backend it runs on (AutoProgram.target); a value made by the other backend
crosses through the host once, and keeps its buffer on both (tinyjax.core.buffer.Value.buffers).
"""
import dataclasses
import hashlib
import json
import os
import threading
import time

import jax
import numpy as np

from tinyjax import config
from tinyjax.ir.backend import Backend, Compiled

_TRIAL_RUNS = {"tinygrad": 4, "xla": 3}  # runs per backend in a trial; the last two are timed (tinygrad: the first
# run compiles, the second is captured by TinyJit, the third replays; XLA: the first compiles)


class AutoBackend(Backend):
  name = "auto"

  def __init__(self, tinygrad: Backend, xla: Backend):
    self.tinygrad, self.xla = tinygrad, xla
    self.device = self.tinygrad.device
    self.choices = _Choices(os.path.expanduser(config.validated("auto_cache")))

  def put(self, host):
    return self.tinygrad.put(host)

  def get(self, buffer):
    return self._backend_of(buffer).get(buffer)

  def wait(self, buffer):
    self._backend_of(buffer).wait(buffer)

  def address(self, buffer):
    return self._backend_of(buffer).address(buffer)

  def why_not(self, eqn) -> str | None:
    return None  # NB: under auto, XLA running an equation is a choice, not a fallback

  def supports_dtype(self, dtype) -> bool:
    return self.tinygrad.supports_dtype(dtype)

  def _backend_of(self, buffer) -> Backend:
    return self.xla if isinstance(buffer, jax.Array) else self.tinygrad

  def moved(self, buffers: list, backend: Backend) -> list:
    """The buffers as `backend` takes them: those the other backend made cross through the host."""
    return [b if self._backend_of(b) is backend or isinstance(b, np.ndarray) and backend is self.tinygrad
            else backend.put(self.get(b)) for b in buffers]

  def compile(self, program) -> Compiled:
    return AutoProgram(self, program)


class AutoProgram(Compiled):
  """A program compiled by both backends; its first run chooses the one that runs it from then on (remembered in
  TINYJAX_AUTO_CACHE, or measured by running both)."""

  def __init__(self, auto: AutoBackend, program):
    self.auto, self.n_eqns = auto, len(program.eqns)
    self.candidates = {"tinygrad": auto.tinygrad.compile(program), "xla": auto.xla.compile(program)}
    self.key = _fingerprint(program, auto.device)
    self.chosen = None  # the choice: remembered, or made by the first run
    self.target = auto.tinygrad  # NB: the first run takes tinygrad's buffers; later ones the chosen backend's
    self.described = (None, None)  # the chosen backend's placement last described, and its description
    if (choice := auto.choices.get(self.key)) is not None:
      self._choose(choice)

  def run(self, inputs):
    if self.chosen is not None:
      outs, ran = self.candidates[self.chosen["backend"]].run(inputs)
    elif (choice := self.auto.choices.get(self.key)) is not None:  # remembered, maybe by another program
      self._choose(choice)
      outs, ran = self.candidates[choice["backend"]].run(self.auto.moved(inputs, self.target))
    else:
      choice, outs, ran = self._trial(inputs)
      self.auto.choices.put(self.key, choice)
      self._choose(choice)
    if self.described[0] is not ran:  # NB: made once per placement the chosen backend returns (a rescue makes one)
      self.described = ran, dataclasses.replace(ran, reason=_reason(self.chosen, self.n_eqns))
    return outs, self.described[1]

  def _choose(self, choice: dict) -> None:
    self.chosen, self.target = choice, getattr(self.auto, choice["backend"])

  def _trial(self, inputs: list):
    """Run the program on each backend until warm: the faster one's choice, and its outputs and placement of its last
    run."""
    times, runs = {}, {}
    for name, backend in (("tinygrad", self.auto.tinygrad), ("xla", self.auto.xla)):
      moved = self.auto.moved(inputs, backend)
      timed = []
      for _ in range(_TRIAL_RUNS[name]):
        start = time.perf_counter()
        runs[name] = self.candidates[name].run(moved)
        for buffer in runs[name][0]:
          backend.wait(buffer)
        timed.append(time.perf_counter() - start)
      times[name] = min(timed[-2:])
    best = min(times, key=times.get)
    return {"backend": best, "tinygrad_ms": times["tinygrad"] * 1e3, "xla_ms": times["xla"] * 1e3}, *runs[best]


def _reason(choice: dict, n_eqns: int) -> str:
  return (f"auto ran a program of {n_eqns} equations on {choice['backend']}: {choice['tinygrad_ms']:.3g} ms per run "
          f"on tinygrad, {choice['xla_ms']:.3g} ms on XLA (measured once, remembered in TINYJAX_AUTO_CACHE)")


def _fingerprint(program, device) -> str:
  """A stable name for the program's structure on this device and these library versions (not its data)."""
  import tinygrad

  def atom(a):
    return str(a) if isinstance(a, int) else f"const {a.aval.str_short()}"
  text = [str(device), jax.__version__, getattr(tinygrad, "__version__", ""),
          " ".join(a.str_short() for a in program.in_avals), " ".join(map(atom, program.outputs))]
  for eqn in program.eqns:
    params = ", ".join(f"{k}={v}" for k, v in sorted(eqn.params.items()))
    text.append(f"{eqn.name} {' '.join(map(atom, eqn.inputs))} -> {eqn.outputs} "
                f"{[a.str_short() for a in eqn.in_avals]} [{params}]")
  return hashlib.sha256("\n".join(text).encode()).hexdigest()


class _Choices:
  """The measured choices, a JSON file of fingerprint -> {backend, tinygrad_ms, xla_ms}, read once, written whole."""

  def __init__(self, path: str):
    self.path, self._lock, self._entries = path, threading.Lock(), None

  def _load(self) -> dict:
    if self._entries is None:
      try:
        with open(self.path) as f:
          self._entries = json.load(f)
      except (OSError, ValueError):  # none yet, or unreadable: measure again
        self._entries = {}
    return self._entries

  def get(self, key: str) -> dict | None:
    with self._lock:
      return self._load().get(key)

  def put(self, key: str, choice: dict) -> None:
    with self._lock:
      entries = self._load()
      entries[key] = choice
      try:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        temporary = f"{self.path}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
          json.dump(entries, f)
        os.replace(temporary, self.path)  # NB: atomic, so that concurrent processes never read half a file
      except OSError:
        pass  # a read-only home: the choice holds for this process only

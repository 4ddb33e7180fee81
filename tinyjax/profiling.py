"""`tinyjax.profile(path)`: a profile of what a block ran, written as Chrome's trace-event JSON (open it in
https://ui.perfetto.dev or chrome://tracing); and JAX's `jax.profiler.trace`, `start_trace` and `stop_trace` as patch
mode runs them (tinyjax/patching.py). What a profile holds: tinyjax/ir/profile.py.
"""
import contextlib
import datetime
import os
import sys

from tinyjax.core.pending import flush
from tinyjax.ir import profile as recording


@contextlib.contextmanager
def profile(path: str | os.PathLike):
  """Record a profile of the block into `path` (gzipped if it ends in .gz): each flushed program compiled and run,
  on which backend, its XLA segments, each kernel's compile, load and runs on its device, the transfers.

  The work the block left pending is run before the profile ends (as a read would run it), so that it is in the
  profile. NB: while a profile records, every kernel and transfer is waited for, so that its span is its own: a
  program that overlaps its kernels with the host runs slower than it would.
  """
  recording.start()
  try:
    yield
    flush()
  finally:
    recording.stop().write(path)


# from start_trace to stop_trace: (the directory JAX would write the run's files to, whether to print the path)
_jax_trace: tuple[str, bool] | None = None


def start_trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False, profiler_options=None) -> None:
  """`jax.profiler.start_trace` under patch mode: a tinyjax profile, which `stop_trace` writes where JAX writes its
  Perfetto trace, `log_dir/plugins/profile/<date and time>/perfetto_trace.json.gz`.

  NB: JAX's profiler traces XLA's devices and writes TensorBoard's files too; tinyjax writes its own trace-event JSON
  alone, always (create_perfetto_trace), and starts no server for Perfetto (create_perfetto_link: the path is
  printed instead). profiler_options configure XLA's profiler: they change nothing here."""
  global _jax_trace
  recording.start()
  run = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S")  # NB: as JAX names a run's directory
  _jax_trace = (os.path.join(os.fspath(log_dir), "plugins", "profile", run), create_perfetto_link)


def stop_trace() -> None:
  """`jax.profiler.stop_trace` under patch mode: the pending work run, then the profile written (see start_trace)."""
  if _jax_trace is None:
    raise RuntimeError("No profile started")  # NB: JAX's message
  try:
    flush()
  finally:
    _write_jax_trace()


def _write_jax_trace() -> None:
  global _jax_trace
  (directory, print_path), _jax_trace = _jax_trace, None
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, "perfetto_trace.json.gz")
  recording.stop().write(path)
  if print_path:
    print(f"tinyjax: profile written to {path}: open it in https://ui.perfetto.dev", file=sys.stderr)


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False, profiler_options=None):
  """`jax.profiler.trace` under patch mode: start_trace, and the profile written when the block ends (after the work
  it left pending, unless it raised)."""
  start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
  try:
    yield
    flush()
  finally:
    _write_jax_trace()

"""`tinyjax coverage`: which primitives tinygrad runs natively and which fall back to XLA, from the rule tables.

With `--device`, also which dtypes that tinygrad device computes (each probed with a small kernel): an
equation in a dtype the device lacks runs on XLA even when its primitive has a rule.
"""
import json
from typing import Annotated

import ml_dtypes
import numpy as np
import typer

DTYPES = {name: np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name) for name in (
  "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
  "uint64", "uint32", "uint16", "uint8", "bool")}
STATUSES = ("native", "inlined", "collective", "fallback")  # of tinyjax.coverage.Row; XLA runs every primitive natively


def dtype_support(device: str) -> tuple[str, dict[str, bool]]:
  """The tinygrad device's name and whether it computes each dtype."""
  from tinyjax.backends.tinygrad import TinygradBackend
  backend = TinygradBackend(device)  # NB: its dtype probes keep a rejecting compiler's messages off stderr
  return backend.device.name, {name: backend.supports_dtype(dtype) for name, dtype in DTYPES.items()}


def coverage(
  device: Annotated[str | None, typer.Option(
    help="Also probe which dtypes this tinygrad device computes (CLANG means CPU).", show_default=False)] = None,
  markdown: Annotated[bool, typer.Option(
    "--markdown", help="Print the table as markdown (docs/primitives.md).")] = False,
  as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
):
  """Show each JAX primitive x backend: native, inlined (a call whose body is run), collective (run inside shard_map
  and pmap) or fallback (runs on XLA).

  The table comes from the rule tables themselves. XLA runs every primitive; a primitive marked fallback runs
  on XLA inside tinygrad programs, costing a copy each way.
  """
  from tinyjax import coverage as table
  from tinyjax.ir.backend import DeviceNotFoundError
  if markdown and device is None and not as_json:
    typer.echo(table.markdown(), nl=False)
    return
  try:
    device, dtypes = dtype_support(device) if device is not None else (None, None)
  except DeviceNotFoundError as error:
    typer.echo(f"tinyjax coverage: {error}", err=True)
    raise typer.Exit(2) from None
  rows = table.rows()
  if as_json:
    typer.echo(json.dumps({"primitives": [{"primitive": r.primitive, "tinygrad": r.status, "xla": "native",
                                           "note": r.note, "complex": r.complex} for r in rows], "dtypes": dtypes}, indent=2))
    return
  if markdown:
    typer.echo(table.markdown())
    typer.echo(f"## dtypes on tinygrad {device}\n\n| dtype | computes |\n|---|---|")
    typer.echo("\n".join(f"| `{name}` | {'yes' if ok else 'no: runs on XLA'} |" for name, ok in dtypes.items()))
    return
  counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
  typer.echo(f"{counts['native']} native, {counts['inlined']} inlined, {counts['collective']} collectives (inside "
             f"shard_map and pmap), {counts['fallback']} fall back to XLA "
             f"(of {len(rows)} primitives)\n")
  width = max(len(r.primitive) for r in rows) + 2
  typer.echo(f"{'primitive':{width}}{'tinygrad':12}{'xla':8}note")
  for r in rows:
    typer.echo(f"{r.primitive:{width}}{r.status:12}{'native':8}{r.note}".rstrip())
  if dtypes is not None:
    typer.echo(f"\ndtypes on tinygrad {device}:")
    for name, ok in dtypes.items():
      typer.echo(f"  {name:10}{'computes' if ok else 'not computed: equations in it run on XLA'}")

"""The `tinyjax` command: list devices, run scripts on a chosen backend and device, show coverage, check the setup,
export a function as C or WebGPU.

Each command lives in its own module; this one registers them with their examples. Heavy imports (tinygrad,
the backends) happen inside the commands.
"""
from typing import Annotated

import typer

from tinyjax.cli import coverage, devices, doctor, export, run

app = typer.Typer(
  name="tinyjax", no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode="markdown",
  help="JAX's API on tinygrad's devices: list the devices, run scripts on them, see what runs natively, export functions as C or WebGPU.",
  epilog="Run `tinyjax COMMAND --help` for a command's options and examples.")


def _examples(*lines: str) -> str:
  return "**Examples**\n\n" + "\n\n".join(f"`{line}`" for line in lines)


app.command(epilog=_examples(
  "tinyjax devices",
  "tinyjax devices --json",
  "TINYJAX_DEVICE=CL tinyjax devices        # marks CL if it works"))(devices.devices)

app.command(
  # NB: the script's own options (`--lr 0.1`) are not tinyjax's: they go to the script, in order
  context_settings={"ignore_unknown_options": True},
  epilog=_examples(
    "tinyjax run train.py --epochs 3                  # on tinygrad's default device",
    "tinyjax run --device CLANG train.py --epochs 3   # CLANG is the CPU device",
    "tinyjax run train.py --device CL --report        # print what ran where at exit",
    "tinyjax run --profile profile.json train.py      # a timeline to open in ui.perfetto.dev",
    "tinyjax run --fallback error model.py            # fail on the first op tinygrad cannot run",
    "tinyjax run --backend xla model.py               # everything on XLA, for comparison",
    "tinyjax run -m mypackage.train --lr 0.1",
    "tinyjax run train.py -- --device cuda            # after --: the script's own --device"))(run.run)

app.command(epilog=_examples(
  "tinyjax coverage",
  "tinyjax coverage --device CPU",
  "tinyjax coverage --markdown > docs/primitives.md"))(coverage.coverage)

app.command(epilog=_examples(
  "tinyjax doctor",
  "DEBUG=2 TINYJAX_DEVICE=CL tinyjax doctor",
  "tinyjax doctor --json"))(doctor.doctor)


app.command(epilog=_examples(
  "tinyjax export model.py:predict --to c -o build/          # build/predict.c, build/predict.h",
  "tinyjax export model.py:predict --to webgpu -o web/       # web/predict.js, web/index.html",
  "tinyjax export model.py:predict --example-args small_batch --name predict_small"))(export.export)


def _version(value: bool):
  if value:
    import importlib.metadata
    typer.echo(f"tinyjax {importlib.metadata.version('tinyjax')}")
    raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option(
  "--version", callback=_version, is_eager=True, help="Print tinyjax's version and exit.")] = False):
  """JAX's API on tinygrad's devices: list the devices, run scripts on them, see what runs natively, export
  functions as C or WebGPU."""


if __name__ == "__main__":
  app()

"""The `tinyjax` command: list devices, run scripts on a chosen backend and device, show coverage, check the setup.

Each command lives in its own module; this one only registers them. Heavy imports (jax, tinygrad) happen
inside the commands, so `--help` and shell completion stay quick.
"""
from typing import Annotated

import typer

from tinyjax.cli import devices

app = typer.Typer(name="tinyjax", no_args_is_help=True, pretty_exceptions_enable=False,
                  help="JAX's API on tinygrad's devices: list devices, run scripts on them, show what runs natively.")

app.command(epilog="""Examples:

  tinyjax devices

  tinyjax devices --json | jq '.[] | select(.available) | .name'
""")(devices.devices)


if __name__ == "__main__":
  app()

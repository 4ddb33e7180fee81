"""The `tinyjax` command line: one module per command, registered on the typer app in main.py."""

import typer


def refuse(command: str, message: str) -> typer.Exit:
  """The exit (status 2, as typer's own usage errors) of `tinyjax <command>` refusing what it was given."""
  typer.echo(f"tinyjax {command}: {message}", err=True)
  return typer.Exit(2)

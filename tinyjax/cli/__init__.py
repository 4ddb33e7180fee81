"""The `tinyjax` command line: one module per command, registered on the typer app in main.py."""

"""The python code blocks of the docs run, in order, one namespace per page (docs must not rot)."""
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).parent.parent / "docs"


@pytest.mark.parametrize("page", ["guide.md", "guarantees.md", "export.md", "devices.md"])
def test_code_blocks_run(page, capsys):
  blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)
  assert blocks, f"{page} has no python blocks"
  namespace: dict = {}
  for block in blocks:
    exec(compile(block, f"{page}", "exec"), namespace)
  assert capsys.readouterr().out

"""JAX's documentation pages, run as plain JAX and under `tinyjax run`, side by side (docs/conformance.md).

    .venv/bin/python scripts/doc_pages.py JAX_DOCS_DIR [PAGE ...] [--device CPU] [--out DIR]

JAX_DOCS_DIR is the docs/ folder of a JAX checkout (tag jax-v0.10.2 for the JAX this project pins). Each page's
code cells (MyST `{code-cell}` blocks) run in order in one process, as a notebook runs them: a cell's last expression
is printed, a cell's exception is printed as `Type: first line` and the page goes on. The page runs twice, as
`python page.py` and as `tinyjax run --device DEVICE --report page.py`; the two outputs are compared line by line
after object addresses and ids are masked, numbers within float32 rounding (a relative 2e-6 or 4e-7 of the
largest number on the line) counting as equal. Prints SAME or DIFF per page, and the lines that differ.
"""
import argparse
import difflib
import pathlib
import re
import subprocess
import sys

# the tutorial pages that need no dataset, no accelerator and no package beyond the test extras
PAGES = [
  "notebooks/thinking_in_jax", "notebooks/Common_Gotchas_in_JAX", "notebooks/Custom_derivative_rules_for_Python_code",
  "notebooks/autodiff_cookbook", "notebooks/autodiff_remat", "notebooks/convolutions",
  "notebooks/Writing_custom_interpreters_in_Jax", "notebooks/vmapped_log_probs", "notebooks/shard_map",
  "automatic-differentiation", "automatic-vectorization", "complex-differentiation", "control-flow",
  "custom_pytrees", "debugging", "external-callbacks", "gradient-checkpointing", "higher-order",
  "jacobian-vector-products", "jaxpr", "jit-compilation", "key-concepts", "pytrees", "random-numbers",
  "stateful-computations", "tracing", "array_refs", "jax-primitives", "autodidax", "autodidax2_part1", "debugging/flags",
  "parallel",
]

DRIVER = '''
import ast as _ast, sys as _sys, random as _random, numpy as _numpy, jax as _jax
# NB: a page that draws from NumPy's or Python's global generator unseeded prints the same on both sides: seeded after
# JAX is imported (importing JAX draws from NumPy's, and `tinyjax run` imports it before the page)
_random.seed(0)
_numpy.random.seed(0)
_namespace = {"__name__": "__main__"}
def _run_cell(_index, _source):
  print(f"--- cell {_index}", flush=True)
  _tree = _ast.parse(_source)
  _last = _tree.body.pop() if _tree.body and isinstance(_tree.body[-1], _ast.Expr) else None
  try:
    exec(compile(_tree, f"<cell {_index}>", "exec"), _namespace)
    if _last is not None:
      _value = eval(compile(_ast.Expression(_last.value), f"<cell {_index}>", "eval"), _namespace)
      if _value is not None:
        print(repr(_value))
  except Exception as _error:
    print(f"{type(_error).__name__}: {(str(_error).splitlines() or [''])[0]}")
  _sys.stdout.flush()
'''


def script_of(page: str) -> str:
  """The page's code cells as one script; IPython magics and shell lines are left out."""
  cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", page, flags=re.S | re.M)
  lines = [DRIVER]
  for index, cell in enumerate(cells):
    source = "\n".join(line for line in cell.split("\n")
                       if not re.match(r"^:\w+:", line) and not line.lstrip().startswith(("%", "!")))
    lines.append(f"_run_cell({index}, {source!r})")
  return "\n".join(lines)


NUMBER = re.compile(r"-?\d+\.\d*(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")
MASKS = [(re.compile(r"0x[0-9a-f]+"), "0x?"), (re.compile(r"id=\d+"), "id=?"), (re.compile(r"\b\d{11,}\b"), "<id>")]


def masked(line: str) -> str:
  for pattern, replacement in MASKS:
    line = pattern.sub(replacement, line)
  return line


def numbers(line: str) -> list[float]:
  return [float(n) for n in NUMBER.findall(masked(line))]


def same_line(a: str, b: str, scale: float) -> bool:
  """Equal after masking, numbers within float32 rounding: a relative 2e-6, or 4e-7 of `scale` (the largest number
  of the block the line is in: an array's entries are computed from sums of that magnitude). NB: numpy prints a
  number with as many digits as its float32 needs, so a one-ulp difference changes a line's text."""
  a, b = masked(a), masked(b)
  if a == b:
    return True
  if NUMBER.sub("#", a).replace(" ", "") != NUMBER.sub("#", b).replace(" ", ""):
    return False
  return all(abs(u - v) <= max(2e-6 * abs(u), 4e-7 * scale) for u, v in zip(numbers(a), numbers(b)))


def differences(expected: list[str], actual: list[str]) -> list[str]:
  """The lines that differ, as `- expected` / `+ actual` (a block of lines replaced by as many: only its pairs that
  differ)."""
  out = []
  matcher = difflib.SequenceMatcher(a=[masked(l) for l in expected], b=[masked(l) for l in actual], autojunk=False)
  for tag, i1, i2, j1, j2 in matcher.get_opcodes():
    if tag == "equal":
      continue
    if tag == "replace" and i2 - i1 == j2 - j1:
      scale = max(map(abs, sum(map(numbers, expected[i1:i2] + actual[j1:j2]), [])), default=0.0)
      for a, b in zip(expected[i1:i2], actual[j1:j2]):
        if not same_line(a, b, scale):
          out += [f"- {a}", f"+ {b}"]
      continue
    out += [f"- {l}" for l in expected[i1:i2]] + [f"+ {l}" for l in actual[j1:j2]]
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("docs", type=pathlib.Path)
  parser.add_argument("pages", nargs="*", default=PAGES)
  parser.add_argument("--device", default="CPU")
  parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("doc-pages"))
  options = parser.parse_args()
  options.out.mkdir(parents=True, exist_ok=True)
  tinyjax = pathlib.Path(sys.executable).with_name("tinyjax")
  differing = 0
  for name in options.pages:
    script = options.out / f"{name.replace('/', '__')}.py"
    script.write_text(script_of((options.docs / f"{name}.md").read_text()))
    runs = {}
    for side, command in (("jax", [sys.executable, script.name]),
                          ("tinyjax", [str(tinyjax), "run", "--device", options.device, "--report", script.name])):
      done = subprocess.run(command, cwd=options.out, capture_output=True, text=True, timeout=1800)
      (options.out / f"{script.stem}.{side}.txt").write_text(done.stdout)
      (options.out / f"{script.stem}.{side}.err").write_text(done.stderr)
      runs[side] = done.stdout.splitlines() + [f"exit code {done.returncode}"]
    found = differences(runs["jax"], runs["tinyjax"])
    differing += bool(found)
    print(f"{'DIFF' if found else 'SAME'} {name}", *found, sep="\n  " if found else "", flush=True)
  print(f"{len(options.pages) - differing} of {len(options.pages)} pages print what JAX prints")


if __name__ == "__main__":
  main()

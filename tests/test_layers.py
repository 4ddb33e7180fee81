"""Layers go one way: each module of tinyjax imports (at any depth, inside a function too) only modules of its own
layer or of those below it, and no module imports one that imports it back. docs/architecture.md names only files
that exist."""
import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).parent.parent / "tinyjax"


def module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported(path: pathlib.Path) -> set[str]:
  """The tinyjax modules `path` imports (a name imported from a package counts when it is a module)."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      submodules = {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
      # `from tinyjax import config` imports the module config (the package above it is everyone's parent)
      found |= submodules or {node.module}
  return {name for name in found if name in MODULES}


# lowest first; a module belongs to the layer of the longest prefix it has here
LAYERS = [
  ("the IR", ("tinyjax.config", "tinyjax.ir")),
  ("the backends", ("tinyjax.backends",)),
  ("choosing between the backends", ("tinyjax.choosing",)),
  ("the front end", ("tinyjax.core",)),
  ("the API", ("tinyjax", "tinyjax.transforms", "tinyjax.patching", "tinyjax.identity", "tinyjax.overrides",
               "tinyjax.transfer", "tinyjax.standalone", "tinyjax.decorator", "tinyjax.coverage")),
  ("the CLI", ("tinyjax.cli",)),
]


def layer_of(module: str) -> int:
  matches = [(len(prefix), level) for level, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
             if module == prefix or module.startswith(prefix + ".")]
  assert matches, f"{module} is in no layer"
  return max(matches)[1]


def test_imports_go_down_the_layers():
  upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {other} ({LAYERS[layer_of(other)][0]})"
            for name, path in MODULES.items() for other in imported(path) if layer_of(other) > layer_of(name)]
  assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


BACKEND = "tinyjax.backends.tinygrad"
# the top of the tinygrad backend: the backend itself, and its rule table with the list of what has no rule yet, which
# the rule families fill and the machinery reads
BACKEND_TOP = {BACKEND, f"{BACKEND}.table", f"{BACKEND}.not_native"}


def test_the_tinygrad_backend_is_folded_by_kind():
  """Its modules sit in rules/, numerics/ and machinery/ (or are BACKEND_TOP); numerics know no primitive (they import
  no rule family and no machinery); the machinery reads the rule table, never a rule family."""
  kind = {name: name.removeprefix(BACKEND + ".").split(".")[0] for name in MODULES
          if name.startswith(BACKEND + ".") and name not in BACKEND_TOP}
  assert set(kind.values()) == {"rules", "numerics", "machinery"}, sorted(set(kind.values()))
  crossings = [f"{name} ({kind[name]}) imports {other} ({kind[other]})" for name in kind
               for other in imported(MODULES[name]) if other in kind
               and (kind[name], kind[other]) in {("numerics", "rules"), ("numerics", "machinery"), ("machinery", "rules")}]
  assert not crossings, "imports across the backend's kinds:\n" + "\n".join(crossings)


# where docs/architecture.md's short paths (`core/pending.py`, `tinygrad/table.py`, `plan.py`) are relative to
ROOTS = ["", "tinyjax", "tinyjax/core", "tinyjax/ir", "tinyjax/backends", "tinyjax/backends/tinygrad",
         *(f"tinyjax/backends/tinygrad/{kind}" for kind in ("rules", "numerics", "machinery")), "tinyjax/choosing",
         "tinyjax/standalone", "tinyjax/cli", "docs"]


def test_the_architecture_names_files_that_exist():
  text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
  named = set(re.findall(r"(?<![\w/.])([\w/-]+\.(?:py|md|sh|js))\b", text))
  assert len(named) > 20, f"docs/architecture.md names too few files to be read: {sorted(named)}"
  named = {name for name in named if not name.startswith("NAME.")}  # an export's files, named by the user
  missing = sorted(name for name in named if not any((PACKAGE.parent / root / name).exists() for root in ROOTS))
  assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan), or of one that imports itself."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for other in graph[node]:
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in on_stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1 or node in graph[node]:
        found.append(sorted(component))

  for node in graph:
    if node not in index:
      visit(node)
  return found


def test_no_import_cycles():
  graph = {name: imported(path) - {name} for name, path in MODULES.items()}
  assert not cycles(graph), f"modules that import each other: {cycles(graph)}"


def test_cycles_are_found():
  assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def private_names_reached(path: pathlib.Path) -> list[str]:
  """The private names (`_name`) of other tinyjax modules that `path` imports or reads as `module._name`."""
  tree, modules, reached = ast.parse(path.read_text()), set(), []
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tinyjax"):
      reached += [f"from {node.module} import {alias.name}" for alias in node.names
                  if alias.name.startswith("_") and not alias.name.startswith("__")]
      modules |= {alias.asname or alias.name for alias in node.names if f"{node.module}.{alias.name}" in MODULES}
    elif isinstance(node, ast.Import):
      modules |= {alias.asname for alias in node.names if alias.asname and alias.name in MODULES}
  reached += [f"{node.value.id}.{node.attr} (line {node.lineno})" for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
              and isinstance(node.value, ast.Name) and node.value.id in modules]
  return reached


def test_no_module_reaches_into_anothers_private_names():
  """A module shares what others use under a public name (linalg's complex pairs are pairs.py's; the loop replays
  are replay.py's), so that no rule family depends on another's internals."""
  reached = {name: found for name, path in MODULES.items() if (found := private_names_reached(path))}
  assert not reached, "\n".join(f"{name}: {', '.join(found)}" for name, found in reached.items())

"""Layers go one way: no module of tinyjax imports, at any depth or inside a function, a module that imports it back."""
import ast
import pathlib

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

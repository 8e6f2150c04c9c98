"""The structure of relay_shell/, measured from its source (standard library only; nothing of the project runs).

    python scripts/check_structure.py          # prints every check and what breaks it; exit 0 when all pass
    python scripts/check_structure.py --json   # the same as JSON (tests/integration/test_structure.py)

The checks (issue 25; the layers and their order are the table in docs/layout.md, read from there):
- no import cycles between modules (lazy imports inside functions and type-checking imports count too);
- no import running back up a layer, and every module placed in a layer;
- no module over MODULE_LIMIT lines and no function over FUNCTION_LIMIT lines, except the EXCEPTIONS below;
- no MCP tool defined inside another function (a tool is a function that takes the MCP `Context`, or one handed
  to make_tool / Tool / add_tool / a `.tool` decorator);
- the runner's modules (runner.py, or every module of runner/) each under RUNNER_LIMIT lines.
Lines are physical lines; a function's lines run from its `def` to its last line (a nested function's count within
its enclosing one). Checked: relay_shell/ and scripts/; tests and benchmarks are not.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "relay_shell"
CHECKED = ("relay_shell", "scripts")
LAYOUT = Path("docs/layout.md")
MODULE_LIMIT = 500  # lines; a module over it fails
FUNCTION_LIMIT = 80  # lines; a function over it fails
RUNNER_LIMIT = 300  # lines; a runner module of this many or more fails
# Allowed over a limit: path (or path:function) -> why. Tables of data and generated text only.
EXCEPTIONS: dict[str, str] = {}
TOOL_FACTORIES = frozenset({"make_tool", "Tool", "add_tool", "tool"})
LAYERS_START = "<!-- layers:start -->"
LAYERS_END = "<!-- layers:end -->"


@dataclass
class Module:
    name: str  # dotted: relay_shell.audit.log
    path: Path  # relative to the root
    lines: int
    tree: ast.Module


@dataclass
class Report:
    modules: int = 0
    layers: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    upward: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    long_modules: list[str] = field(default_factory=list)
    long_functions: list[str] = field(default_factory=list)
    nested_tools: list[str] = field(default_factory=list)
    long_runner_modules: list[str] = field(default_factory=list)
    excepted: list[str] = field(default_factory=list)

    def failures(self) -> dict[str, list[str]]:
        """Each check's name and what breaks it (an empty list: the check passes)."""
        return {
            "import cycles": [" -> ".join(cycle) for cycle in self.cycles],
            "imports running up a layer": self.upward,
            "modules not placed in a layer": self.unplaced,
            f"modules over {MODULE_LIMIT} lines": self.long_modules,
            f"functions over {FUNCTION_LIMIT} lines": self.long_functions,
            "tools defined inside another function": self.nested_tools,
            f"runner modules of {RUNNER_LIMIT} lines or more": self.long_runner_modules,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the structure of relay_shell/ (docs/layout.md).")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the checkout")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    arguments = parser.parse_args(argv)
    try:
        report = check(arguments.root)
    except LayoutError as exc:
        print(f"check_structure: {exc}", file=sys.stderr)
        return 2
    failures = report.failures()
    if arguments.json:
        print(json.dumps({"modules": report.modules, "layers": report.layers, "checks": failures}, indent=2))
    else:
        print(render(report))
    return 1 if any(failures.values()) else 0


class LayoutError(Exception):
    """docs/layout.md has no layer table the check can read."""


def check(root: Path) -> Report:
    modules = read_modules(root)
    layers = read_layers(root / LAYOUT)
    report = Report(modules=len(modules), layers=[name for name, _ in layers])
    edges = import_edges(modules)
    report.cycles = find_cycles(edges)
    layer_of = {name: place(module, layers) for name, module in modules.items()}
    report.unplaced = sorted(str(module.path) for name, module in modules.items() if layer_of[name] is None)
    for source, targets in sorted(edges.items()):
        for target, line in sorted(targets.items()):
            source_layer, target_layer = layer_of[source], layer_of[target]
            if source_layer is not None and target_layer is not None and target_layer < source_layer:
                report.upward.append(
                    f"{modules[source].path}:{line} imports {target} "
                    f"({layers[source_layer][0]} -> {layers[target_layer][0]}, a layer above)"
                )
    for module in modules.values():
        measure(module, report)
    return report


def read_modules(root: Path) -> dict[str, Module]:
    modules = {}
    for top in CHECKED:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root)
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            text = path.read_text(encoding="utf-8")
            modules[".".join(parts)] = Module(".".join(parts), relative, len(text.splitlines()), ast.parse(text))
    return modules


def read_layers(layout: Path) -> list[tuple[str, list[str]]]:
    """The layers, top first: (name, members), a member being `path.py` or `folder/` below relay_shell/."""
    try:
        text = layout.read_text(encoding="utf-8")
    except OSError as exc:
        raise LayoutError(f"cannot read {layout}: {exc.strerror or exc}") from None
    if LAYERS_START not in text or LAYERS_END not in text:
        raise LayoutError(f"{layout} has no {LAYERS_START} … {LAYERS_END} table")
    table = text.split(LAYERS_START, 1)[1].split(LAYERS_END, 1)[0]
    rows = [row.strip() for row in table.splitlines() if row.strip().startswith("|")]
    separator = next((index for index, row in enumerate(rows) if set(row) <= set("|-: ")), None)
    layers = []
    for row in rows[separator + 1 :] if separator is not None else []:  # the rows under the header
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        members = re.findall(r"`([^`]+)`", cells[1]) if len(cells) > 1 else []
        if members:
            layers.append((cells[0], members))
    if not layers:
        raise LayoutError(f"the layer table in {layout} lists no layers")
    return layers


def place(module: Module, layers: list[tuple[str, list[str]]]) -> int | None:
    """The index of the layer a module of relay_shell/ belongs to (its most specific member); scripts/ has none."""
    if module.path.parts[0] != PACKAGE:
        return 0  # scripts run the package from outside: above every layer
    inside = "/".join(module.path.parts[1:])
    best: tuple[int, int] | None = None  # (length of the member matched, layer)
    for index, (_name, members) in enumerate(layers):
        for member in members:
            matches = inside.startswith(member) if member.endswith("/") else inside == member
            if matches and (best is None or len(member) > best[0]):
                best = (len(member), index)
    return best[1] if best is not None else None


def import_edges(modules: dict[str, Module]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}."""
    edges: dict[str, dict[str, int]] = {}
    for name, module in modules.items():
        targets: dict[str, int] = {}
        for node in ast.walk(module.tree):
            for target in imported(node, modules):
                if target != name:
                    targets.setdefault(target, getattr(node, "lineno", 0))
        edges[name] = targets
    return edges


def imported(node: ast.AST, modules: dict[str, Module]) -> list[str]:
    found = []
    if isinstance(node, ast.Import):
        found = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
            submodule = f"{node.module}.{alias.name}"
            found.append(submodule if submodule in modules else node.module)
    return [target for target in found if target in modules]


def find_cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle through every strongly connected group of modules (Tarjan's algorithm), as a path that ends where
    it starts."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index_of[node] = low[node] = len(index_of)
        stack.append(node)
        for child in sorted(edges.get(node, {})):
            if child not in index_of:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index_of[child])
        if low[node] == index_of[node]:
            group = set()
            member = ""
            while member != node:
                member = stack.pop()
                group.add(member)
            if len(group) > 1:
                groups.append(group)

    for name in sorted(edges):
        if name not in index_of:
            visit(name)
    return [cycle_through(group, edges) for group in groups]


def cycle_through(group: set[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """The shortest way from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {child: [start, child] for child in sorted(edges.get(start, {})) if child in group}
    queue = list(paths)
    while queue:
        node = queue.pop(0)
        if node == start:
            return paths[node]
        for child in sorted(edges.get(node, {})):
            if child in group and child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    return [start, start]


def measure(module: Module, report: Report) -> None:
    path = str(module.path)
    if module.lines > MODULE_LIMIT:
        if path in EXCEPTIONS:
            report.excepted.append(f"{path} {module.lines} lines: {EXCEPTIONS[path]}")
        else:
            report.long_modules.append(f"{path} {module.lines}")
    in_runner = module.name == f"{PACKAGE}.runner" or module.name.startswith(f"{PACKAGE}.runner.")
    if in_runner and module.lines >= RUNNER_LIMIT:
        report.long_runner_modules.append(f"{path} {module.lines}")
    for function, enclosing in functions(module.tree):
        length = (function.end_lineno or function.lineno) - function.lineno + 1
        where = f"{path}:{function.name}"
        if length > FUNCTION_LIMIT:
            if where in EXCEPTIONS:
                report.excepted.append(f"{where} {length} lines: {EXCEPTIONS[where]}")
            else:
                report.long_functions.append(f"{where} {length} (line {function.lineno})")
        if enclosing is not None and is_tool(function, enclosing):
            report.nested_tools.append(f"{path}:{function.lineno} {function.name} inside {enclosing.name}")


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST, enclosing: Function | None = None) -> list[tuple[Function, Function | None]]:
    """Every function with the function it is defined in (None at module or class level)."""
    found: list[tuple[Function, Function | None]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((node, enclosing))
            found += functions(node, node)
        else:
            found += functions(node, enclosing)
    return found


def is_tool(function: Function, enclosing: Function) -> bool:
    """A function MCP serves as a tool: it takes the request's Context, is decorated as a tool, or is handed to
    what makes tools in the function that encloses it."""
    parameters = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    for parameter in parameters:
        annotation = ast.unparse(parameter.annotation) if parameter.annotation is not None else ""
        if parameter.arg == "ctx" or annotation.split(".")[-1].split("[")[0] == "Context":
            return True
    for decorator in function.decorator_list:
        called = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(called).split(".")[-1] in TOOL_FACTORIES:
            return True
    for node in ast.walk(enclosing):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in TOOL_FACTORIES:
            keywords = [keyword.value for keyword in node.keywords if keyword.arg in ("fn", "function")]
            handed = [*node.args[:1], *keywords]
            if any(isinstance(value, ast.Name) and value.id == function.name for value in handed):
                return True
    return False


def render(report: Report) -> str:
    failures = report.failures()
    folders = ", ".join(f"{top}/" for top in CHECKED)
    lines = [
        f"relay-shell structure: {report.modules} modules in {folders}; layers from {LAYOUT}, top first:",
        "  " + " > ".join(report.layers),
        "",
    ]
    for check_name, problems in failures.items():
        lines.append(f"{check_name}: {len(problems)}")
        lines += [f"  {problem}" for problem in problems]
    if report.excepted:
        lines.append(f"allowed over a limit (EXCEPTIONS in {Path(__file__).name}): {len(report.excepted)}")
        lines += [f"  {item}" for item in report.excepted]
    failed = [name for name, problems in failures.items() if problems]
    lines.append("")
    if failed:
        lines.append(f"FAILED: {len(failed)} of {len(failures)} checks ({'; '.join(failed)})")
    else:
        lines.append(f"OK: all {len(failures)} checks pass")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

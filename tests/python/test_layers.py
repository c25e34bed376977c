"""The include graph, read from the sources: transport/'s folders form a stack in which every include
points down (or stays in its folder), the top-level folders too, and no file reaches itself through its
includes. docs/layers.md draws the same stack."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# transport/'s folders, bottom up: each may include its own and those before it.
TRANSPORT_LAYERS = [
    "base",
    "reduce",
    "ucx",
    "topology",
    "arena",
    "group",
    "window",
    "message_algorithms",
    "shm_algorithms",
    "flat",
    "agreement",
    "hierarchy",
    "nccl",
    "select",
]
# The top-level folders, bottom up (tests/ and packaging/ may use them all).
TOP_LAYERS = ["transport", "registry", "plugin"]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _sources():
    for top in TOP_LAYERS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".h", ".hpp", ".cpp")):
                    path = os.path.relpath(os.path.join(folder, name), ROOT)
                    with open(os.path.join(ROOT, path)) as f:
                        yield path, INCLUDE.findall(f.read())


def _layer(path):
    parts = path.split("/")
    top = TOP_LAYERS.index(parts[0])
    inner = TRANSPORT_LAYERS.index(parts[1]) if parts[0] == "transport" and len(parts) > 2 else -1
    return top, inner


def test_every_transport_file_is_in_a_layer():
    loose = [p for p, _ in _sources() if p.startswith("transport/") and p.count("/") == 1 and not p.endswith("meson.build")]
    assert not loose, f"files in transport/ itself, outside every layer: {loose}"
    unknown = sorted({p.split("/")[1] for p, _ in _sources() if p.startswith("transport/")} - set(TRANSPORT_LAYERS))
    assert not unknown, f"transport/ folders missing from TRANSPORT_LAYERS (and docs/layers.md): {unknown}"


def test_includes_point_down():
    upward = []
    for path, includes in _sources():
        here = _layer(path)
        for target in includes:
            if target.split("/")[0] not in TOP_LAYERS:
                continue  # a test helper or a generated header
            there = _layer(target)
            if there[0] > here[0] or (there[0] == here[0] == 0 and there[1] > here[1]):
                upward.append(f"{path} -> {target}")
    assert not upward, "includes that run back up:\n  " + "\n  ".join(upward)


def test_no_file_reaches_itself():
    graph = {path: [t for t in includes if t.split("/")[0] in TOP_LAYERS] for path, includes in _sources()}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for target in graph.get(node, []):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "include cycles:\n  " + "\n  ".join(cycles)

#!/usr/bin/env python3
"""Each library layer may include only its own headers and those of the layers below it: the graph of
src/CMakeLists.txt and docs/ARCHITECTURE.md. An include that crosses a layer the wrong way compiles (one
include root serves every layer) and may even link, so this check is what holds the line.

It also holds the roles to their option structs: ROLE_FILES may not name Scenario.

Usage: check_layers.py SOURCE_DIR   (exit 1 and one line per offending #include or role line)
"""
import pathlib
import re
import sys

# Layer -> the layers it may include (itself included). Order: bottom to top.
ALLOWED = {
    "core": {"core"},
    "scenario": {"scenario", "core"},
    "fpt": {"fpt", "core"},
    "zeno_rules": {"zeno_rules", "core"},
    "ps": {"ps", "scenario", "core"},
    "train": {"train", "ps", "scenario", "core"},
    "report": {"report", "ps", "scenario", "core"},
    "zeno_roles": {"zeno_roles", "zeno_rules", "train", "ps", "scenario", "core"},
    "cuda": {"cuda", "ps", "scenario", "core"},  # the CUDA device path, for the real backends only
}
BACKEND = {"sim", "realnet"}
for backend in BACKEND:
    ALLOWED[backend] = {backend, "report", "zeno_roles", "zeno_rules", "train", "ps", "scenario", "core", "fpt"}
ALLOWED["realnet"].add("cuda")  # the simulator models the device (ps/device.hpp EmulatedDevice)
# The ps-lite API runs its nodes on the real backend.
ALLOWED["pslite"] = ALLOWED["realnet"] | {"pslite", "realnet"}
# ps-lite applications in the simulator: the ps-lite API on the SimGrid backend.
ALLOWED["simapp"] = ALLOWED["pslite"] | {"sim", "simapp"}
# pstwin.torch's C++ half uses the installed ps-lite API (<ps/ps.h>, libpstwin) and nothing inside it.
ALLOWED["torch"] = {"torch"}
ALLOWED["cli"] = set(ALLOWED) | {"cli"}
ZENO_RULES = {"rules", "attacks", "vector_math", "config_support"}
# The protocol roles and the parts they build take option structs (src/ps/role_options.hpp), made from
# the scenario at the edge (zeno/roles.cpp); none of them may take or keep the whole Scenario.
ROLE_FILES = [f"src/{name}.{ext}" for name in ("ps/ps_node", "ps/scheduler", "ps/server", "ps/worker",
                                                 "ps/aggregator", "ps/lb_intake", "ps/host_reduce",
                                                 "ps/kv_client", "zeno/validator", "pslite/app_node")
              for ext in ("hpp", "cpp")]


def layer_of(include: str) -> str | None:
    """The layer of a project header path such as "ps/server.hpp" or "zeno/rules.hpp"."""
    parts = include.split("/")
    if len(parts) < 2:
        return None
    directory, stem = parts[0], pathlib.Path(parts[-1]).stem
    if directory == "zeno":
        return "zeno_rules" if stem in ZENO_RULES else "zeno_roles"
    if directory in ALLOWED:
        return directory
    return None


def source_layer(root: pathlib.Path, path: pathlib.Path) -> str:
    rel = path.relative_to(root).parts
    top = rel[1] if rel[0] == "src" else rel[0]
    if top == "zeno":
        return "zeno_rules" if path.stem in ZENO_RULES else "zeno_roles"
    return top


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    offences = []
    files = [p for d in ("src", "sim", "realnet") for p in sorted((root / d).rglob("*"))
             if p.suffix in (".cpp", ".hpp", ".cu")]
    for path in files:
        layer = source_layer(root, path)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not match:
                continue
            target = layer_of(match.group(1))
            if target is not None and target not in ALLOWED[layer]:
                offences.append(f"{path.relative_to(root)}:{number}: layer {layer} includes {match.group(1)} "
                                f"(layer {target}), which is above it or beside it")
    for rel in ROLE_FILES:
        for number, line in enumerate((root / rel).read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bScenario\b", line.split("//")[0]):
                offences.append(f"{rel}:{number}: a role names Scenario: give it an option struct "
                                f"(src/ps/role_options.hpp) built in zeno/roles.cpp instead")
    for offence in offences:
        print(offence)
    print(f"layers: {len(files)} files checked, {len(offences)} offending include(s) or role(s)")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())

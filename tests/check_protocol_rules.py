#!/usr/bin/env python3
"""Protocol code runs unchanged in the simulator and on real networks only if it never creates threads,
reads the wall clock, sleeps, draws unseeded randomness or iterates a hash-ordered container (the order
would differ between runs and backends). This check holds the layers below the backends to that:
src/core, src/scenario, src/ps, src/report, src/train, src/zeno, src/fpt. A line that must break the rule
says why with a trailing comment `protocol-rules: allow (REASON)`.

Usage: check_protocol_rules.py SOURCE_DIR   (exit 1 and one line per offence when a rule is broken)
"""
import pathlib
import re
import sys

LAYERS = ["src/core", "src/scenario", "src/ps", "src/report", "src/train", "src/zeno", "src/fpt"]
RULES = [
    (r"\bstd::(j?thread|async)\b|\bpthread_create\b", "creates a thread: use Runtime::executor"),
    (r"\b(steady|system|high_resolution)_clock\b|\bgettimeofday\b|\bclock_gettime\b|\btime\(\s*(nullptr|NULL|0)\s*\)",
     "reads a clock: use Runtime::now"),
    (r"\bsleep_for\b|\bsleep_until\b|\busleep\b|\bnanosleep\b|\bsleep\(", "sleeps: use Runtime::start_timer"),
    (r"\brandom_device\b|\b(s?rand|random|drand48)\(\)|\bsrand\(", "unseeded randomness: use Runtime::random or RandomStream"),
    (r"\bunordered_(map|set|multimap|multiset)\b", "hash order: use std::map/std::set or a vector ordered by a sequence number"),
]
ALLOW = re.compile(r"protocol-rules: allow \(.+\)")


def strip_comment(line: str) -> str:
    # Good enough for this code base: no "//" inside string literals on a line that breaks a rule.
    return line.split("//", 1)[0]


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    offences = []
    checked = 0
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in (".cpp", ".hpp", ".h", ".cc"):
                continue
            checked += 1
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ALLOW.search(line):
                    continue
                code = strip_comment(line)
                for pattern, why in RULES:
                    if re.search(pattern, code):
                        offences.append(f"{path.relative_to(root)}:{number}: {why}: {line.strip()}")
    for offence in offences:
        print(offence)
    print(f"protocol rules: {checked} files checked, {len(offences)} offence(s)")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())

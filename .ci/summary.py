"""CI's closing summary, read from the lanes' JUnit files: what failed, and where the time went.

Usage: python .ci/summary.py LANE=FILE.xml [LANE=FILE.xml ...]

It prints a few dozen lines, so that they end CI's log (whose end is what a reader sees first):
per lane its tests, failures and seconds; the slowest tests of all lanes; the seconds per test
file; and last, each failure with the first line of its message (a log shown by its head and tail
keeps them).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def cases(path: str):
    """(node id, seconds, failure's first line or None) of each test case in a JUnit file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"  (no results in {path}: {exc})")
        return
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        node = f"{module}.py::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        why = None
        if bad is not None:
            text = (bad.get("message") or bad.text or "").strip()
            why = text.splitlines()[0][:220] if text else bad.tag
        yield node, float(case.get("time") or 0.0), why


def main(argv: list[str]) -> int:
    lanes = [arg.split("=", 1) for arg in argv]
    rows, per_file, failures = [], defaultdict(float), []
    print("==================== CI summary (from the lanes' JUnit files) ====================")
    for lane, path in lanes:
        got = list(cases(path))
        failed = [(n, why) for n, _, why in got if why is not None]
        print(f"{lane}: {len(got)} tests, {len(failed)} failed, {sum(s for _, s, _ in got):.0f} s in tests")
        failures += [(lane, node, why) for node, why in failed]
        for node, seconds, _ in got:
            rows.append((seconds, lane, node))
            per_file[(lane, node.split("::")[0])] += seconds
    print("slowest tests (s, lane):")
    for seconds, lane, node in sorted(rows, reverse=True)[:20]:
        print(f"  {seconds:7.1f} {lane:5} {node}")
    print("seconds per test file (lane):")
    for (lane, name), seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {seconds:7.1f} {lane:5} {name}")
    if failures:
        print(f"failed ({len(failures)}):")
    for lane, node, why in failures:
        print(f"  FAILED {lane:5} {node}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

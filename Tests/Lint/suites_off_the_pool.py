#!/usr/bin/env python3
"""Every test suite runs off the shared pool (`OffThePoolTrait`).

A suite without the trait runs on Swift's shared pool, one thread per core, beside the relays
and listeners the other tests run in process. Two such tests that compute or wait for a child
process for a few seconds hold both of a 2-core machine's threads, and every in-process part
waits with them: the HTTP listener's tests timed out after 5 s unanswered while the integrity
voyages ran on the pool. Each file with a `@Test` must name the trait (`.offThePool` or
`.longOffThePool`) on its suite. `make lint` runs this.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRAIT = re.compile(r"@Suite\([^)]*\.(offThePool|longOffThePool)\b")


def main():
    problems = []
    for directory, _, files in os.walk(os.path.join(ROOT, "Tests")):
        for name in sorted(files):
            if not name.endswith(".swift"):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as source:
                text = source.read()
            if "@Test" in text and not TRAIT.search(text):
                problems.append(os.path.relpath(path, ROOT))
    for path in sorted(problems):
        print(f"suites_off_the_pool: {path}: its suite lacks @Suite(.offThePool)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""No direct read of the system clock in Sources/ (issue 37 §1: time is handed in).

Every part takes its time from the `RelayClock` it is handed (the system's for the daemon, a
`SimulatedClock` that moves only when told for tests and the simulation). Only the clock's own
files read the system's (`Sources/GeoRelayCore/Support/WallClock.swift`, `RelayClock.swift`);
the test kit and the benchmark drive and measure real time and are not looked at. Text inside a
multi-line string literal is not Swift (the status page's script runs on the crew's browser's
clock). `make lint` runs this and fails on any read it finds.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXEMPT_FILES = {
    "Sources/GeoRelayCore/Support/WallClock.swift",
    "Sources/GeoRelayCore/Support/RelayClock.swift",
}
EXEMPT_DIRS = ("Sources/GeoRelayTestKit/", "Sources/georelay-bench/")
# WallClock's reads, a Swift clock read directly (ContinuousClock.now, `.now` where an instant is
# expected, a fresh ContinuousClock()), Foundation's Date(), the C call itself, and a sleep on the
# system's clock (Task.sleep: a wait a simulated clock could not end).
READ = re.compile(
    r"WallClock\.(nowMs|monotonicNs|monotonicMs|steadyMs|latestMs)\b|\bTask\.sleep\b"
    r"|\bContinuousClock\(\)|\bContinuousClock\.now\b|\bSuspendingClock\b|\bDate\(\)"
    r"|\bclock_gettime\b|[(:=,\[]\s*\.now\b|\.now\s*-"
)


def reads(path):
    """The lines of `path` that read the system clock, as (line number, text)."""
    found = []
    in_literal = False
    with open(path, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            code = line if not in_literal else ""
            if line.count('"""') % 2 == 1:
                # Code before an opening delimiter counts; text after it is the literal's.
                code = line.split('"""', 1)[0] if not in_literal else ""
                in_literal = not in_literal
            code = code.split("//", 1)[0]
            if READ.search(code):
                found.append((number, line.strip()))
    return found


def main():
    problems = []
    for directory, _, files in os.walk(os.path.join(ROOT, "Sources")):
        for name in sorted(files):
            if not name.endswith(".swift"):
                continue
            path = os.path.relpath(os.path.join(directory, name), ROOT)
            if path in EXEMPT_FILES or path.startswith(EXEMPT_DIRS):
                continue
            for number, text in reads(os.path.join(ROOT, path)):
                problems.append(f"{path}:{number}: reads the system clock ({text}); take the RelayClock handed in")
    for problem in problems:
        print(f"clock_reads: {problem}", file=sys.stderr)
    print(f"clock_reads: {len(problems)} direct reads of the system clock outside the clock's files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Direct reads of the system clock in Sources/ (issue 37 §1: time is handed in).

Only the clock's own files may read it (`Sources/GeoRelayCore/Support/WallClock.swift`,
`RelayClock.swift`); the test kit and the benchmark drive and measure real time and are not
looked at. The files not yet handed a clock are listed in clock_reads.allowed with how many
reads each has: that is a ratchet. A file not listed may read the clock not at all, a listed one
no more often than its count says; a file done leaves the list (its count printed here as 0
asks for that). `make lint` runs this.
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
# expected, a fresh ContinuousClock()), Foundation's Date(), and the C call itself.
READ = re.compile(
    r"WallClock\.(nowMs|monotonicNs|monotonicMs|steadyMs|latestMs)\b"
    r"|\bContinuousClock\(\)|\bContinuousClock\.now\b|\bSuspendingClock\b|\bDate\(\)"
    r"|\bclock_gettime\b|[(:=,\[]\s*\.now\b|\.now\s*-"
)


def reads(path):
    count = 0
    with open(path, encoding="utf-8") as source:
        for line in source:
            code = line.split("//", 1)[0]
            count += len(READ.findall(code))
    return count


def main():
    found = {}
    for directory, _, files in os.walk(os.path.join(ROOT, "Sources")):
        for name in files:
            if not name.endswith(".swift"):
                continue
            path = os.path.relpath(os.path.join(directory, name), ROOT)
            if path in EXEMPT_FILES or path.startswith(EXEMPT_DIRS):
                continue
            n = reads(os.path.join(ROOT, path))
            if n:
                found[path] = n
    allowed = {}
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "clock_reads.allowed")) as listing:
        for line in listing:
            line = line.split("#", 1)[0].strip()
            if line:
                count, path = line.split(None, 1)
                allowed[path] = int(count)
    problems = []
    for path, n in sorted(found.items()):
        if path not in allowed:
            problems.append(f"{path}: reads the system clock {n} time(s); take a RelayClock instead")
        elif n > allowed[path]:
            problems.append(f"{path}: reads the system clock {n} times, {allowed[path]} allowed; take a RelayClock instead")
    for path, n in sorted(allowed.items()):
        if found.get(path, 0) < n:
            problems.append(f"{path}: now {found.get(path, 0)} read(s), listed with {n}: lower its count in clock_reads.allowed")
    for problem in problems:
        print(f"clock_reads: {problem}", file=sys.stderr)
    total = sum(found.values())
    print(f"clock_reads: {total} direct reads of the system clock in {len(found)} files still to hand a clock")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/sh
# georelay's libFuzzer targets (swiftc -sanitize=fuzzer,address), built from
# GeoRelayCore's sources plus one entry file each.
#
#   Tests/Fuzz/fuzz.sh ci                      every target, FUZZ_RUNS inputs each (make test)
#   Tests/Fuzz/fuzz.sh build                   only builds the fuzzer (make test, beside the release build)
#   Tests/Fuzz/fuzz.sh lines [libFuzzer flags] one target for as long as you like, e.g.
#                                              -max_total_time=3600; new inputs go to .build/fuzz/corpus-lines
#   Tests/Fuzz/fuzz.sh keep lines              merges those into Tests/Fuzz/corpus/lines (only inputs that
#                                              add coverage, none quoting ../shared's logs)
#
# Targets: lines (the socket protocol: JSON, OsmAnd query, NMEA), config (JSON5 config),
# encoders (a stored position of arbitrary bits through every encoder GeoRelayCore holds).
# A crash leaves its input in .build/fuzz/; copy it to Tests/Fuzz/crashes/<target>-<name>,
# where FuzzRegressionTests replays it forever after.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/.build/fuzz"
runs=${FUZZ_RUNS:-30000}
mkdir -p "$out"

# One binary for every target (Tests/Fuzz/FuzzEntry.swift; GEORELAY_FUZZ_TARGET picks one).
target_known() {
    case $1 in
        lines|config|encoders) ;;
        *) echo "fuzz.sh: no target '$1' (lines, config, encoders)" >&2; exit 64 ;;
    esac
}

build() {
    target_known "$1"
    entry="$root/Tests/Fuzz/FuzzEntry.swift"
    binary="$out/fuzz"
    # Rebuilt only when a source is newer than the binary.
    if [ ! -x "$binary" ] || [ -n "$(find "$root/Sources/GeoRelayCore" "$root/Sources/CLinux" "$entry" -newer "$binary" \( -name '*.swift' -o -name '*.h' \) | head -1)" ]; then
        echo "fuzz.sh: building the fuzzer"
        rm -f "$binary"
        swiftc -sanitize=fuzzer,address -parse-as-library -O -g \
            -package-name georelay -module-name GeoRelayCore -swift-version 6 -I "$root/Sources/CLinux" \
            $(find "$root/Sources/GeoRelayCore" -name '*.swift' | sort) "$entry" \
            -o "$binary" 2>&1 | grep -v "Cannot export local symbol" >&2 || true
        [ -x "$binary" ] || { echo "fuzz.sh: build of the fuzzer failed" >&2; exit 1; }
    fi
}

seeds() {
    case $1 in
        lines) [ -d "$root/../shared/testdata/nmea" ] && echo "$root/../shared/testdata/nmea" || true ;;
        config) echo "$root/config" ;;
    esac
}

run_ci() {
    target=$1
    build "$target"
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    mkdir -p "$scratch/corpus"
    cp "$root/Tests/Fuzz/corpus/$target/"* "$scratch/corpus/" 2>/dev/null || true
    for crash in "$root/Tests/Fuzz/crashes/$target-"*; do [ -f "$crash" ] && cp "$crash" "$scratch/corpus/"; done
    # The scratch corpus first: libFuzzer writes new inputs there, never into the repository.
    if ! GEORELAY_FUZZ_TARGET="$target" "$out/fuzz" -runs="$runs" -max_len=8192 -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
            -artifact_prefix="$out/$target-" "$scratch/corpus" $(seeds "$target") > "$out/$target.log" 2>&1; then
        tail -40 "$out/$target.log" >&2
        echo "fuzz.sh: $target crashed; the input is in $out/ (copy it to Tests/Fuzz/crashes/$target-<name>)" >&2
        exit 1
    fi
    echo "fuzz.sh: $target: $(grep -E 'stat::number_of_executed_units' "$out/$target.log" | awk '{print $2}') inputs, no crash \
($(grep -E 'stat::peak_rss_mb' "$out/$target.log" | awk '{print $2}') MB peak)"
    rm -rf "$scratch"
    trap - EXIT
}

case ${1:-ci} in
    build)
        # The fuzzer alone (one swiftc process, one core), for make test to build beside the
        # release build, which leaves the other core mostly idle.
        build lines
        ;;
    ci)
        run_ci lines
        run_ci config
        run_ci encoders
        ;;
    keep)
        target=${2:?"fuzz.sh keep <target>"}
        build "$target"
        merged=$(mktemp -d)
        GEORELAY_FUZZ_TARGET="$target" "$out/fuzz" -merge=1 -max_len=8192 "$merged" "$root/Tests/Fuzz/corpus/$target" "$out/corpus-$target" > "$out/merge.log" 2>&1
        # ../shared's receiver logs seed the fuzzer but are not ours to copy: drop inputs quoting them.
        python3 - "$merged" "$root/../shared/testdata/nmea" <<'PY'
import os, sys
merged, shared = sys.argv[1], sys.argv[2]
lines = set()
if os.path.isdir(shared):
    for name in os.listdir(shared):
        with open(os.path.join(shared, name), "rb") as f:
            lines.update(l.strip() for l in f.read().split(b"\n") if len(l.strip()) >= 40)
for name in os.listdir(merged):
    path = os.path.join(merged, name)
    with open(path, "rb") as f:
        if any(l.strip() in lines for l in f.read().split(b"\n")):
            os.unlink(path)
PY
        rm -rf "$root/Tests/Fuzz/corpus/$target"
        mv "$merged" "$root/Tests/Fuzz/corpus/$target"
        chmod 755 "$root/Tests/Fuzz/corpus/$target"
        echo "fuzz.sh: Tests/Fuzz/corpus/$target now holds $(ls "$root/Tests/Fuzz/corpus/$target" | wc -l) inputs"
        ;;
    *)
        target=$1
        shift
        build "$target"
        mkdir -p "$out/corpus-$target"
        GEORELAY_FUZZ_TARGET="$target" exec "$out/fuzz" -max_len=8192 -timeout=10 -artifact_prefix="$out/$target-" "$@" \
            "$out/corpus-$target" "$root/Tests/Fuzz/corpus/$target" $(seeds "$target")
        ;;
esac

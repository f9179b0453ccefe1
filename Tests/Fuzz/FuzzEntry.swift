// libFuzzer's entry for every target, built by Tests/Fuzz/fuzz.sh into one module with
// GeoRelayCore's sources. One binary serves all targets (GEORELAY_FUZZ_TARGET picks one), so
// the sanitized build of the library, about 80 s on the 2-core CI machine, is paid once.
#if canImport(Glibc)
    import Glibc
#endif

/// Read once: libFuzzer calls the entry for every input.
let fuzzTarget: @Sendable (UnsafeRawBufferPointer) -> Void = {
    let name = getenv("GEORELAY_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    switch name {
    case "lines": return FuzzTargets.lines
    case "config": return FuzzTargets.config
    case "encoders": return FuzzTargets.encoders
    default:
        print("fuzz: GEORELAY_FUZZ_TARGET must be lines, config or encoders (was '\(name)')")
        exit(64)
    }
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafeRawPointer, _ count: Int) -> CInt {
    fuzzTarget(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}

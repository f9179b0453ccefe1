// libFuzzer entry for config loading (JSON5); built by Tests/Fuzz/fuzz.sh
// into one module with GeoRelayCore's sources.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.config(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}

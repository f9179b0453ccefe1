// libFuzzer entry for the socket protocol's line decoder; built by Tests/Fuzz/fuzz.sh
// into one module with GeoRelayCore's sources.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLines(_ data: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.lines(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}

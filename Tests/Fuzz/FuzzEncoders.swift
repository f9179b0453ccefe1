// libFuzzer entry for the encoders of stored positions (OsmAnd, JSON numbers and times,
// attributes) fed arbitrary bits; built by Tests/Fuzz/fuzz.sh into one module with
// GeoRelayCore's sources.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEncoders(_ data: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.encoders(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}

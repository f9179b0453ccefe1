import GeoRelayCore

extension SimulatedNetwork {
    /// The link broken as `FaultProxy`'s `mode` breaks it on loopback: a terminal's ways while its
    /// satellite is down (`TerminalKind`), or the far end's (`ServerFault`); `.pass`: neither.
    package func setBroken(_ mode: FaultProxy.Mode) {
        switch mode {
        case .pass:
            setDown(nil)
            setFault(nil)
        case .refuse: setDown(.refuse)
        case .closeAtOnce: setDown(.close)
        case .hold: setDown(.hold)
        case .drop: setDown(.drop)
        case .blackHole: setFault(.blackHole)
        case .closeAfterRequest: setFault(.closeAfterRequest)
        case .resetMidRequest: setFault(.resetMidRequest)
        case .resetMidResponse: setFault(.resetMidResponse)
        }
    }
}

import GeoRelaySpool

@testable import GeoRelayForward

extension Array {
    /// The round tests' view of a state machine's answer: "open 0", "send 1", …, in order, with
    /// the progress handed over kept apart in `progress`.
    func described<ID>(progress: inout [DeliveryUpdate]) -> [String] where Element == ConnectionAction<ID> {
        var described: [String] = []
        for action in self {
            switch action {
            case .open(let id): described.append("open \(id)")
            case .verify(let id): described.append("verify \(id)")
            case .send(let id): described.append("send \(id)")
            case .close(let id): described.append("close \(id)")
            case .progress(let update): progress.append(update)
            }
        }
        return described
    }
}

/// Lets a bounded number of events through per time window: the warnings a client or a
/// collector can provoke (rejected lines, the HTTP listener's answers) are logged in bursts
/// of at most `perWindow`, so a flood cannot fill the diagnostic log.
package struct RateLimiter {
    package let perWindow: Int
    package let windowMs: Int64
    private var windowStart: Int64 = 0
    private var count = 0

    package init(perWindow: Int, windowMs: Int64) {
        self.perWindow = perWindow
        self.windowMs = windowMs
    }

    package mutating func allow(nowMs: Int64) -> Bool {
        if nowMs - windowStart >= windowMs {
            windowStart = nowMs
            count = 0
        }
        count += 1
        return count <= perWindow
    }
}

/// A token bucket per client address: each may make `perSecond` requests a second on average,
/// `burst` at once. A client past it is told to come back later (`429`), and one flooding host
/// cannot take the port from the phones on the same Wi-Fi. Memory stays bounded: past 4,096
/// clients, those whose bucket has refilled are forgotten (a new one starts full anyway).
package struct ClientBuckets {
    package let perSecond: Double
    package let burst: Double
    private var buckets: [String: (tokens: Double, atMs: Int64)] = [:]
    private static let maxClients = 4096

    package init(perSecond: Int, burst: Int) {
        self.perSecond = Double(max(1, perSecond))
        self.burst = Double(max(1, burst))
    }

    package var clientCount: Int { buckets.count }

    package mutating func allow(_ client: String, nowMs: Int64) -> Bool {
        var bucket = buckets[client] ?? (burst, nowMs)
        let elapsed = Double(max(0, nowMs.saturatingMinus(bucket.atMs))) / 1000
        bucket = (min(burst, bucket.tokens + elapsed * perSecond), nowMs)
        let allowed = bucket.tokens >= 1
        if allowed { bucket.tokens -= 1 }
        buckets[client] = bucket
        if buckets.count > Self.maxClients { forgetRefilled(nowMs: nowMs) }
        return allowed
    }

    private mutating func forgetRefilled(nowMs: Int64) {
        let full = (burst / perSecond) * 1000
        buckets = buckets.filter { Double(nowMs.saturatingMinus($0.value.atMs)) < full }
        // Every one of them busy: the oldest half goes, so the map cannot grow without bound.
        if buckets.count > Self.maxClients {
            let sorted = buckets.sorted { $0.value.atMs > $1.value.atMs }.prefix(Self.maxClients / 2)
            buckets = Dictionary(uniqueKeysWithValues: sorted.map { ($0.key, $0.value) })
        }
    }
}

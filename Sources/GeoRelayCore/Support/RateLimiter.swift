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


import Foundation

/// Chunks (or packets) on their way, each with the time it arrives at the far end: the fault
/// proxy's and the satellite wire's delay lines.
final class DelayLine: @unchecked Sendable {
    private let condition = NSCondition()
    private var chunks: [(chunk: [UInt8], due: UInt64)] = []
    private var head = 0
    private var closed = false

    func push(_ chunk: [UInt8], due: UInt64) {
        condition.lock()
        chunks.append((chunk, due))
        condition.signal()
        condition.unlock()
    }

    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// The next chunk, waiting for one; nil once closed and empty.
    func pop() -> (chunk: [UInt8], due: UInt64)? {
        condition.lock()
        defer { condition.unlock() }
        while head == chunks.count, !closed { condition.wait() }
        guard head < chunks.count else { return nil }
        let next = chunks[head]
        head += 1
        if head > 64, head * 2 > chunks.count {
            chunks.removeFirst(head)
            head = 0
        }
        return next
    }
}

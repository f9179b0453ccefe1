import Testing

/// Polls `condition` for at most ten seconds of real time: a part on a simulated clock still runs
/// its work on the pool or a thread of its own, so a test waits for it to reach the step it looks
/// for before it moves the clock again. A bound on a condition, not an assumed rate.
func pollUntil(_ what: String, _ condition: () throws -> Bool) async throws {
    for _ in 0..<1000 {
        if try condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("gave up after 10 s waiting for \(what)")
    throw CancellationError()
}

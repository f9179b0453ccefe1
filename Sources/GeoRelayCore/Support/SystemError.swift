import Glibc

/// A failed system call: which call, on what, and `errno`'s text.
package struct SystemError: Error, Sendable, CustomStringConvertible {
    package let call: String
    package let errno: Int32
    package let context: String

    package init(call: String, errno: Int32, context: String = "") {
        self.call = call
        self.errno = errno
        self.context = context
    }

    package var description: String {
        let what = context.isEmpty ? call : "\(call) \(context)"
        return "\(what): \(String(cString: strerror(errno)))"
    }
}

/// What a call on a non-blocking descriptor did: its result, or nothing because it would have
/// had to wait (`EAGAIN`/`EWOULDBLOCK`), which is the loop's cue to wait for readiness and
/// not a failure (swift-nio's `IOResult`).
package enum IOResult<Value: Sendable>: Sendable {
    case processed(Value)
    case wouldBlock
}

extension IOResult: Equatable where Value: Equatable {}

/// The one place system-call results become Swift errors; retries `EINTR`
/// (swift-nio's `syscall(blocking:where:_:)`).
///
/// For calls that do not block or that the caller lets block. A call on a non-blocking
/// descriptor, where `EAGAIN` is an answer rather than an error, goes through
/// `syscall(blocking:_:_:_:)` instead.
@discardableResult
package func syscall<T: FixedWidthInteger>(_ name: String, _ context: @autoclosure () -> String = "", _ body: () -> T)
    throws(SystemError) -> T
{
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = Glibc.errno
        if code == EINTR { continue }
        throw SystemError(call: name, errno: code, context: context())
    }
}

/// A call on a descriptor that may be non-blocking (`recv`, `send`, `accept4`, `read`):
/// `EINTR` is retried, `EAGAIN`/`EWOULDBLOCK` comes back as `.wouldBlock` when `blocking`
/// is true (the call could block, and the descriptor said it would rather not), and every
/// other failure is thrown.
///
/// With `blocking` false, a would-block answer is thrown like any other error: the caller
/// did not expect the descriptor to be non-blocking.
///
/// `body` runs again after `EINTR`, so it must compute what depends on time (a poll's
/// remaining timeout) each time it runs.
package func syscall<T: FixedWidthInteger & Sendable>(
    blocking: Bool, _ name: String, _ context: @autoclosure () -> String = "", _ body: () -> T
) throws(SystemError) -> IOResult<T> {
    while true {
        let result = body()
        if result >= 0 { return .processed(result) }
        let code = Glibc.errno
        if code == EINTR { continue }
        if blocking, code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
        throw SystemError(call: name, errno: code, context: context())
    }
}

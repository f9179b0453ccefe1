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

/// The one place system-call results become Swift errors; retries `EINTR`
/// (swift-nio's `syscall(blocking:where:_:)`).
@discardableResult
package func syscall<T: FixedWidthInteger>(_ name: String, _ context: @autoclosure () -> String = "", _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = Glibc.errno
        if code == EINTR { continue }
        throw SystemError(call: name, errno: code, context: context())
    }
}

import Dispatch
import Glibc

/// Delivers Unix signals as an async sequence, through Dispatch signal
/// sources (the handler runs on a queue, not in signal context).
/// `@unchecked`: the sources are set once in `init` and only cancelled in `deinit`.
package final class SignalStream: @unchecked Sendable {
    package let signals: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]
    private let queue = DispatchQueue(label: "georelay.signals")

    package init(_ numbers: [Int32]) {
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        signals = stream
        var sources: [any DispatchSourceSignal] = []
        for number in numbers {
            // The default action (terminate) must not run; the source sees the signal instead.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    deinit {
        for source in sources { source.cancel() }
    }
}

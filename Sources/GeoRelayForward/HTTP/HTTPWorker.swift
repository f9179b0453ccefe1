import GeoRelayCore

/// One curl handle on its own serial queue: one kept-alive connection.
///
/// Cancelling the calling task abandons the transfer (curl's progress callback
/// sees the abort flag within about a second), so shutdown never waits for a
/// 30-second timeout on a dead uplink.
package final class HTTPWorker: Sendable {
    private let easy: QueueConfined<CurlEasy>

    /// - Parameter meter: where the connection's bytes are billed (its destination's meter).
    package init(label: String, tls: Configuration.TLSSettings = .init(), meter: WireMeter? = nil) throws(CurlError) {
        easy = QueueConfined(label: label, try CurlEasy(tls: tls, meter: meter))
    }

    /// The next request opens a new connection (the route moved).
    package func forgetConnections() async {
        await easy.run { $0.forgetConnections() }
    }

    package func perform(_ request: HTTPRequest) async -> Result<HTTPResponse, CurlError> {
        let abort = AbortFlag()
        return await withTaskCancellationHandler {
            await easy.run { easy -> Result<HTTPResponse, CurlError> in
                do throws(CurlError) {
                    return .success(try easy.perform(request, abort: abort))
                } catch {
                    return .failure(error)
                }
            }
        } onCancel: {
            abort.set()
        }
    }
}

import GeoRelayCore

/// One curl handle on its own serial queue: one kept-alive connection.
///
/// Cancelling the calling task abandons the transfer (curl's progress callback
/// sees the abort flag within about a second), so shutdown never waits for a
/// 30-second timeout on a dead uplink.
package final class HTTPWorker: Sendable {
    private let easy: QueueConfined<CurlEasy>

    package init(label: String, tls: Configuration.TLSSettings = .init()) throws(CurlError) {
        easy = QueueConfined(label: label, try CurlEasy(tls: tls))
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

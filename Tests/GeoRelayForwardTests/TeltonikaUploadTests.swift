import CCurl
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

@testable import GeoRelayForward

/// `georelay send`'s exchange with the Teltonika port (`TeltonikaUpload`), against servers whose
/// answers arrive the way a real one's can.
@Suite(.offThePool) struct TeltonikaUploadTests {
    /// Traccar answers a short id only once the frame that came with it has arrived, then the
    /// frame's count: both answers can reach the client in one read (they did in about half the
    /// runs of `TeltonikaEndToEndTests`, whose id goes alone but is answered before the client reads
    /// again). The acknowledgement behind the id's answer is the upload's success, not a timeout.
    @Test func bothAnswersInOneReadAreDelivered() async throws {
        let position = Position(device: "a", timeMs: 1_700_000_000_000, lat: 59.5, lon: 10.5)
        let identification = try TeltonikaCodec.identification(uniqueID: position.device)
        try #require(
            TeltonikaCodec.identificationNeedsCompanion(identification), "the id goes in one write with the frame")
        let frame = TeltonikaCodec.dataFrame(records: [TeltonikaCodec.record(from: position)])
        let received = Mutex<[UInt8]>([])
        let server = try TestTCPListener(name: "teltonika-both-answers") { fd, _ in
            var chunk = [UInt8](repeating: 0, count: 4096)
            var bytes: [UInt8] = []
            // The id and the whole frame first, then both answers in a single segment.
            while bytes.count < identification.count + frame.count {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n < 0, errno == EINTR { continue }
                if n <= 0 { break }
                bytes += chunk[0..<n]
            }
            received.withLock { $0 = bytes }
            let answers: [UInt8] = [0x01, 0, 0, 0, 1]
            _ = answers.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // Until the client closes: closing first could reset the answers away.
            while chunk.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, 0) }) > 0 {}
        }
        defer { server.stop() }
        var settings = Configuration.DestinationSettings()
        settings.traccarProtocol = .teltonika
        settings.url = "tcp://127.0.0.1:\(server.port)"
        // Generous for a loaded make test; before the fix this test failed by running into it.
        settings.requestTimeoutSeconds = 20
        let started = ContinuousClock.now
        let outcome = try await offThePool { [settings] in TeltonikaUpload.send(position, settings: settings) }
        guard case .delivered = outcome else {
            Issue.record("expected delivered, got \(outcome) after \(ContinuousClock.now - started)")
            return
        }
        #expect(received.withLock { $0 } == identification + frame, "the id and the frame, once each")
    }
}

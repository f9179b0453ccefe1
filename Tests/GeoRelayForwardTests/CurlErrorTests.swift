import CCurl
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// curl's easy and multi codes share numbers; an error says which handle it came from.
@Suite(.offThePool) struct CurlErrorTests {
    @Test func aMultiCodeIsNotTheEasyCodeOfTheSameNumber() throws {
        let multi = try CurlMulti()
        let easy = try CurlEasy()
        try multi.add(easy)
        defer { multi.remove(easy) }
        // Adding it twice is the multi handle's error 7, CURLM_ADDED_ALREADY; easy code 7 is CURLE_COULDNT_CONNECT.
        let error = #expect(throws: CurlError.self) { try multi.add(easy) }
        #expect(error?.code == .multi(CURLM_ADDED_ALREADY), "\(error.map { "\($0)" } ?? "no error")")
        #expect(
            CURLM_ADDED_ALREADY.rawValue == Int32(CURLE_COULDNT_CONNECT.rawValue),
            "the two codes this test tells apart share a number")
        #expect(error?.code != .easy(CURLE_COULDNT_CONNECT))
        #expect(error?.isConnectFailure == false, "a multi handle's refusal is not a refused connection")
        #expect(error?.description.hasPrefix("curl multi error 7: ") == true, "\(error.map { "\($0)" } ?? "")")
    }

    @Test func anEasyCodeSaysItIsOne() {
        let error = CurlError(CURLE_COULDNT_CONNECT, message: "Couldn't connect to server")
        #expect(error.isConnectFailure)
        #expect(error.description == "curl error 7: Couldn't connect to server")
    }
}

import CCurl
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// An error says curl's code and its text.
@Suite(.offThePool) struct CurlErrorTests {
    @Test func anEasyCodeSaysItIsOne() {
        let error = CurlError(CURLE_COULDNT_CONNECT, message: "Couldn't connect to server")
        #expect(error.isConnectFailure)
        #expect(error.description == "curl error 7: Couldn't connect to server")
    }
}

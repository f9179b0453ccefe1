import CCurl
import GeoRelayCore

/// A destination's looks at its link over a `RoundNetwork` instead of libcurl's own handles: the
/// bare attempt (`ConnectCheck`) and the probe (`ServerCheck`'s GET), each timed and read exactly
/// as theirs are. How a destination on a simulated link watches for its return; blocking, so each
/// runs on a thread of its own.
package enum NetworkChecks {
    /// One bare attempt: opened or not, and how quickly (`ConnectCheck.outcome`).
    package static func connect(over network: any RoundNetwork, clock: any RelayClock) -> ConnectCheck.Outcome {
        let started = clock.now()
        let opened = (try? network.open()) != nil
        return ConnectCheck.outcome(opened: opened, took: started.duration(to: clock.now()))
    }

    /// A GET of `url` with nothing in it, within `timeout`: what its answer says of the link
    /// (`ServerCheck.answer`), and the bytes it cost both ways.
    package static func probe(over network: any RoundNetwork, url: String, timeout: Duration, clock: any RelayClock)
        -> (answer: ServerCheck.Answer, wireBytes: Int)
    {
        let request = HTTPRequest(method: "GET", url: url)
        let (result, wireBytes) = exchange(request, over: network, timeout: timeout, clock: clock)
        switch result {
        case .success: return (ServerCheck.answer(result), wireBytes)
        case .failure: return (.nothing, wireBytes)
        }
    }

    /// One request on a connection of its own, answered within `timeout` or not: the answer, or
    /// why none came in libcurl's terms (as `HTTPWorker` would have said it), and the bytes both
    /// ways. The push destination's token and login requests on a simulated link.
    package static func exchange(
        _ request: HTTPRequest, over network: any RoundNetwork, timeout: Duration, clock: any RelayClock
    ) -> (result: Result<HTTPResponse, CurlError>, wireBytes: Int) {
        let deadline = clock.now() + timeout
        let framing: HTTP1Request
        do {
            framing = try HTTP1Request(
                method: request.method, target: try HTTP1Target(url: request.url), headers: request.headers)
        } catch {
            return (.failure(CurlError(CURLE_URL_MALFORMAT, message: "\(error)")), 0)
        }
        let connection: any RoundConnection
        do {
            connection = try network.open()
        } catch {
            return (.failure(CurlError(CURLE_COULDNT_CONNECT, message: error.message)), 0)
        }
        var output: [UInt8] = []
        framing.append(body: request.body, to: &output)
        var sent = 0
        var parser = HTTP1ResponseParser()
        var received = 0
        func answered(_ response: HTTP1Response) -> (Result<HTTPResponse, CurlError>, Int) {
            var answer = response.response
            answer.wireBytes = sent + received
            return (.success(answer), sent + received)
        }
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 1)
        defer { scratch.deallocate() }
        while clock.now() < deadline {
            do throws(ConnectionFailure) {
                while sent < output.count {
                    let taken = try connection.send(output, from: sent)
                    if taken == 0 { break }
                    sent += taken
                }
                while let count = try connection.receive(into: scratch) {
                    if count == 0 {
                        if let response = try? parser.finish() { return answered(response) }
                        return (
                            .failure(CurlError(CURLE_GOT_NOTHING, message: "Empty reply from server")), sent + received
                        )
                    }
                    received += count
                    parser.append(UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                }
            } catch {
                return (.failure(CurlError(CURLE_RECV_ERROR, message: error.message)), sent + received)
            }
            do throws(HTTP1ParseError) {
                if let response = try parser.next() { return answered(response) }
            } catch {
                return (.failure(CurlError(CURLE_WEIRD_SERVER_REPLY, message: "\(error)")), sent + received)
            }
            _ = network.wait([(connection, sent < output.count)], until: deadline)
        }
        let waited = timeout / .milliseconds(1)
        return (
            .failure(CurlError(CURLE_OPERATION_TIMEDOUT, message: "Operation timed out after \(waited) milliseconds")),
            sent + received
        )
    }

    /// The Teltonika port's probe (`TeltonikaProbe`): an identification as the probe's id, and the
    /// first answer within `timeout`.
    package static func teltonikaProbe(over network: any RoundNetwork, timeout: Duration, clock: any RelayClock)
        -> (answer: ServerCheck.Answer, wireBytes: Int)
    {
        let deadline = clock.now() + timeout
        guard let connection = try? network.open() else { return (.nothing, 0) }
        var exchange = TeltonikaExchange(identification: TeltonikaProbe.identification)
        exchange.queueIdentification()
        var received = 0
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 1)
        defer { scratch.deallocate() }
        while clock.now() < deadline {
            do throws(ConnectionFailure) {
                while exchange.hasOutput {
                    let taken = try connection.send(exchange.output, from: exchange.sentBytes)
                    if taken == 0 { break }
                    exchange.wrote(taken)
                }
                while let count = try connection.receive(into: scratch) {
                    if count == 0 { return (.nothing, exchange.sentBytes + received) }
                    received += count
                    if let event = exchange.received(UnsafeRawBufferPointer(rebasing: scratch[..<count])).first {
                        return (TeltonikaProbe.answer(event), exchange.sentBytes + received)
                    }
                }
            } catch {
                return (.nothing, exchange.sentBytes + received)
            }
            _ = network.wait([(connection, exchange.hasOutput)], until: deadline)
        }
        return (.nothing, exchange.sentBytes + received)
    }
}

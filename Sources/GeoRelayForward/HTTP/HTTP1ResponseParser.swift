import GeoRelayCore

/// A final response read off a connection that `HTTP1ResponseParser` framed.
package struct HTTP1Response: Sendable {
    /// Status, headers and body. `wireBytes` counts the bytes this response took on the
    /// receiving side only (any 1xx before it included); the request's bytes are the sender's to add.
    package var response: HTTPResponse
    /// Whether the connection may carry further responses: false after `Connection: close`,
    /// an HTTP/1.0 response without `Connection: keep-alive`, and a body that ended with the connection.
    package var keepAlive: Bool
}

/// Why a response stream could not be parsed. Once a parser has thrown, the connection's
/// framing is lost: every later call throws the same error, and the connection must be closed.
package struct HTTP1ParseError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Sendable, Hashable {
        case statusLine, switchingProtocols, fieldLine, obsoleteFold, lineEnding
        case contentLength, conflictingContentLength, lengthAndTransferEncoding, transferCoding
        case headerTooLarge, bodyTooLarge, chunk, truncated
    }

    private let code: Code
    private init(_ code: Code) { self.code = code }

    /// Not `HTTP/1.0` or `HTTP/1.1`, a space and a status code from 100 to 599, then optionally a reason.
    package static let malformedStatusLine = Self(.statusLine)
    /// `101 Switching Protocols`: the relay never asks for an upgrade.
    package static let unexpectedSwitchingProtocols = Self(.switchingProtocols)
    /// A header (or trailer) line that is not `token ":" value` with visible characters.
    package static let malformedHeaderField = Self(.fieldLine)
    /// A header line continued on the next line (obs-fold, RFC 9112 §5.2).
    package static let obsoleteLineFolding = Self(.obsoleteFold)
    /// A CR not followed by LF, or an LF without its CR.
    package static let invalidLineEnding = Self(.lineEnding)
    /// A Content-Length that is not a decimal number that fits.
    package static let invalidContentLength = Self(.contentLength)
    /// Two Content-Length values that disagree.
    package static let conflictingContentLength = Self(.conflictingContentLength)
    /// Both Content-Length and Transfer-Encoding: a smuggling vector, so never guessed at.
    package static let contentLengthWithTransferEncoding = Self(.lengthAndTransferEncoding)
    /// A transfer coding other than exactly `chunked`, or Transfer-Encoding in an HTTP/1.0 response.
    package static let unsupportedTransferCoding = Self(.transferCoding)
    /// The status line and headers (or a chunk line, or the trailers) exceed `maxHeaderBytes`.
    package static let headerSectionTooLarge = Self(.headerTooLarge)
    /// The body exceeds `maxBodyBytes`.
    package static let bodyTooLarge = Self(.bodyTooLarge)
    /// A chunk size that is not hexadecimal or does not fit, bad extensions, or data not followed by CRLF.
    package static let malformedChunk = Self(.chunk)
    /// The connection ended inside a response.
    package static let truncatedResponse = Self(.truncated)

    /// Short, fixed text: safe for logs and metric labels (never echoes what the server sent).
    package var description: String {
        switch code {
        case .statusLine: "malformed HTTP status line"
        case .switchingProtocols: "unexpected 101 Switching Protocols"
        case .fieldLine: "malformed HTTP header field"
        case .obsoleteFold: "obsolete line folding in HTTP header"
        case .lineEnding: "bare CR or LF in HTTP response"
        case .contentLength: "invalid Content-Length"
        case .conflictingContentLength: "conflicting Content-Length values"
        case .lengthAndTransferEncoding: "both Content-Length and Transfer-Encoding"
        case .transferCoding: "unsupported Transfer-Encoding"
        case .headerTooLarge: "HTTP header section too large"
        case .bodyTooLarge: "HTTP response body too large"
        case .chunk: "malformed chunked encoding"
        case .truncated: "connection closed inside an HTTP response"
        }
    }
}

/// Reads HTTP/1.1 responses off one connection, for requests sent pipelined: feed it bytes as they
/// arrive with `append`, take complete responses in order with `next`, and call `finish` when the
/// peer closes.
///
/// Strict on purpose. With requests pipelined, a response framed wrongly would shift every later
/// answer onto the wrong request, so anything unexpected (bad status line, bare CR or LF, obs-fold,
/// Content-Length and Transfer-Encoding together, duplicate lengths that disagree, codings other
/// than `chunked`, more than the limits) is an error, never a guess.
///
/// Interim 1xx responses (100, 103, …) are skipped; their bytes count in the next final response's
/// `wireBytes`. 204 and 304 have no body. A response with neither Content-Length nor chunked coding
/// runs until the connection closes (`finish` completes it). Trailers are checked and dropped.
///
/// - Important: it assumes no request was `HEAD` or `CONNECT` (their responses look like they have
///   bodies that never come); the relay sends neither on a pipelined connection.
///
/// No Foundation: it works on one byte buffer with a read index and compacts only when most of the
/// buffer has been consumed, so a response costs its headers' strings and its body's array.
package struct HTTP1ResponseParser: Sendable {
    /// The most a status line and its headers may take; also each chunk-size line, and the trailers.
    package let maxHeaderBytes: Int
    /// The largest body taken.
    package let maxBodyBytes: Int

    private var buffer: [UInt8] = []
    /// The first byte not yet consumed.
    private var readIndex = 0
    /// How far past `readIndex` the current line was already searched for its CRLF.
    private var scanned = 0
    private var state = State.statusLine
    private var current = Pending()
    private var peerClosed = false
    private var failure: HTTP1ParseError?

    private enum State {
        case statusLine
        case headerLines
        case fixedBody(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
    }

    /// What is known of the response being read.
    private struct Pending {
        var status = 0
        var isHTTP10 = false
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var contentLength: Int?
        var hasTransferEncoding = false
        var isChunked = false
        var connectionClose = false
        var connectionKeepAlive = false
        /// Bytes of the current header section, chunk line or trailer section, against `maxHeaderBytes`.
        var sectionBytes = 0
        /// Everything consumed for this response so far, interim responses included.
        var wireBytes = 0

        /// Forgets an interim response but keeps counting its bytes.
        mutating func resetForNextHead() {
            self = Pending(wireBytes: wireBytes)
        }
    }

    /// - Parameters:
    ///   - maxHeaderBytes: the most a status line and its headers may take (also each chunk line, and the trailers).
    ///   - maxBodyBytes: the largest body taken; anything larger is an error, not a truncated body.
    package init(maxHeaderBytes: Int = 64 * 1024, maxBodyBytes: Int = 1 << 20) {
        precondition(maxHeaderBytes > 0 && maxBodyBytes >= 0)
        self.maxHeaderBytes = maxHeaderBytes
        self.maxBodyBytes = maxBodyBytes
    }

    /// Bytes received and not yet returned in a response: 0 exactly when the stream is at a
    /// response boundary (nothing of a next response has arrived).
    package var bufferedBytes: Int { buffer.count - readIndex + current.wireBytes }

    /// Adds bytes received from the connection. Generic at no cost: the hot caller (`PipelinedLane`)
    /// is in this module, and a release build specializes it for its `UnsafeRawBufferPointer`.
    package mutating func append(_ bytes: some Collection<UInt8>) {
        precondition(!peerClosed, "HTTP1ResponseParser: bytes appended after finish()")
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// The next complete final response, or nil when more bytes are needed.
    package mutating func next() throws(HTTP1ParseError) -> HTTP1Response? {
        if let failure { throw failure }
        do {
            return try parse()
        } catch {
            failure = error
            throw error
        }
    }

    /// The peer closed the connection: returns the responses still buffered one per call (like
    /// `next`), completes a body that runs until the close, then returns nil. Anything partial
    /// left over is `truncatedResponse`. Append nothing after calling it.
    package mutating func finish() throws(HTTP1ParseError) -> HTTP1Response? {
        peerClosed = true
        return try next()
    }

    // MARK: - The state machine

    private mutating func parse() throws(HTTP1ParseError) -> HTTP1Response? {
        while true {
            switch state {
            case .statusLine:
                try checkStatusLineStart()
                guard let line = try takeLine() else { return try endOfInput() }
                try parseStatusLine(line)
                state = .headerLines
            case .headerLines:
                guard let line = try takeLine() else { return try endOfInput() }
                if line.isEmpty {
                    if let response = try endOfHead() { return response }
                } else {
                    try parseField(line, isTrailer: false)
                }
            case .fixedBody(let remaining):
                let taken = try takeBody(upTo: remaining)
                if taken == remaining { return emit() }
                state = .fixedBody(remaining: remaining - taken)
                return try endOfInput()
            case .chunkSize:
                guard let line = try takeLine() else { return try endOfInput() }
                let size = try parseChunkSize(line)
                current.sectionBytes = 0
                if size == 0 {
                    state = .trailers
                } else {
                    guard size <= maxBodyBytes - current.body.count else { throw .bodyTooLarge }
                    state = .chunkData(remaining: size)
                }
            case .chunkData(let remaining):
                let taken = try takeBody(upTo: remaining)
                guard taken == remaining else {
                    state = .chunkData(remaining: remaining - taken)
                    return try endOfInput()
                }
                state = .chunkDataEnd
            case .chunkDataEnd:
                let available = buffer.count - readIndex
                if available >= 1, buffer[readIndex] != .cr { throw .malformedChunk }
                guard available >= 2 else { return try endOfInput() }
                guard buffer[readIndex + 1] == .lf else { throw .malformedChunk }
                consume(2)
                state = .chunkSize
            case .trailers:
                guard let line = try takeLine() else { return try endOfInput() }
                if line.isEmpty { return emit() }
                try parseField(line, isTrailer: true)
            case .untilClose:
                _ = try takeBody(upTo: Int.max)
                guard peerClosed else { return nil }
                return emit()
            }
        }
    }

    /// What running out of bytes means: wait for more, or, once the peer closed, the end.
    private func endOfInput() throws(HTTP1ParseError) -> HTTP1Response? {
        guard peerClosed else { return nil }
        if case .statusLine = state, current.wireBytes == 0, readIndex == buffer.count { return nil }
        throw .truncatedResponse
    }

    /// The header section just ended: skip an interim response, or decide how the body is framed.
    private mutating func endOfHead() throws(HTTP1ParseError) -> HTTP1Response? {
        if current.status < 200 {
            current.resetForNextHead()
            state = .statusLine
            return nil
        }
        if current.hasTransferEncoding {
            if current.contentLength != nil { throw .contentLengthWithTransferEncoding }
            if current.isHTTP10 || !current.isChunked { throw .unsupportedTransferCoding }
        }
        current.sectionBytes = 0
        if current.status == 204 || current.status == 304 { return emit() }
        if current.isChunked {
            state = .chunkSize
        } else if let length = current.contentLength {
            guard length <= maxBodyBytes else { throw .bodyTooLarge }
            if length == 0 { return emit() }
            current.body.reserveCapacity(length)
            state = .fixedBody(remaining: length)
        } else {
            state = .untilClose
        }
        return nil
    }

    private mutating func emit() -> HTTP1Response {
        var keepAlive = !current.connectionClose && (!current.isHTTP10 || current.connectionKeepAlive)
        if case .untilClose = state { keepAlive = false }
        let response = HTTP1Response(
            response: HTTPResponse(
                status: current.status, headers: current.headers, body: current.body, wireBytes: current.wireBytes),
            keepAlive: keepAlive)
        current = Pending()
        state = .statusLine
        return response
    }

    // MARK: - Bytes

    private mutating func consume(_ count: Int) {
        readIndex += count
        scanned = 0
        current.wireBytes += count
    }

    /// Moves up to `limit` buffered bytes into the body.
    private mutating func takeBody(upTo limit: Int) throws(HTTP1ParseError) -> Int {
        let count = min(limit, buffer.count - readIndex)
        guard count > 0 else { return 0 }
        guard count <= maxBodyBytes - current.body.count else { throw .bodyTooLarge }
        current.body.append(contentsOf: buffer[readIndex..<(readIndex + count)])
        consume(count)
        return count
    }

    /// The next CRLF-terminated line (without its CRLF) if it has all arrived, consumed. The range
    /// stays valid until the next `append`. Counts against `maxHeaderBytes` with the section's
    /// earlier lines, so a server trickling an endless header cannot grow the buffer unbounded.
    private mutating func takeLine() throws(HTTP1ParseError) -> Range<Int>? {
        let limit = maxHeaderBytes - current.sectionBytes
        var i = readIndex + scanned
        let end = buffer.count
        while i < end {
            let byte = buffer[i]
            if byte == .lf { throw .invalidLineEnding }
            if byte == .cr {
                guard i + 1 < end else { break }
                guard buffer[i + 1] == .lf else { throw .invalidLineEnding }
                let line = readIndex..<i
                let length = i + 2 - readIndex
                guard length <= limit else { throw .headerSectionTooLarge }
                current.sectionBytes += length
                consume(length)
                return line
            }
            i += 1
        }
        scanned = i - readIndex
        guard scanned <= limit else { throw .headerSectionTooLarge }
        return nil
    }

    /// Drops consumed bytes once they are most of the buffer, so the copy is amortised.
    private mutating func compact() {
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            readIndex = 0
        } else if readIndex >= 4096, readIndex >= buffer.count / 2 {
            buffer.removeSubrange(0..<readIndex)
            readIndex = 0
        }
    }

    // MARK: - Lines

    /// Fails as soon as the first bytes cannot begin `HTTP/1.`, rather than waiting for the end of
    /// a line that garbage (a TLS alert on a plain connection, a stray byte) may never send.
    private func checkStatusLineStart() throws(HTTP1ParseError) {
        let expected: StaticString = "HTTP/1."
        let count = min(expected.utf8CodeUnitCount, buffer.count - readIndex)
        for k in 0..<count where buffer[readIndex + k] != expected.utf8Start[k] { throw .malformedStatusLine }
    }

    /// `HTTP/1.x NNN[ reason]`.
    private mutating func parseStatusLine(_ line: Range<Int>) throws(HTTP1ParseError) {
        let s = line.lowerBound
        // `HTTP/1.` itself was checked by checkStatusLineStart: a line of 12 bytes has all 7 buffered.
        guard line.count >= 12, buffer[s + 7] == .zero || buffer[s + 7] == .one, buffer[s + 8] == .space,
            let status = decimal((s + 9)..<(s + 12)), (100...599).contains(status)
        else { throw .malformedStatusLine }
        if line.count > 12 {
            guard buffer[s + 12] == .space else { throw .malformedStatusLine }
            for i in (s + 13)..<line.upperBound where !Self.isFieldValueByte(buffer[i]) { throw .malformedStatusLine }
        }
        if status == 101 { throw .unexpectedSwitchingProtocols }
        current.status = status
        current.isHTTP10 = buffer[s + 7] == .zero
    }

    /// `name ":" OWS value OWS`, keeping what decides framing.
    private mutating func parseField(_ line: Range<Int>, isTrailer: Bool) throws(HTTP1ParseError) {
        let first = buffer[line.lowerBound]
        if first == .space || first == .tab { throw .obsoleteLineFolding }
        var colon = line.lowerBound
        while colon < line.upperBound, buffer[colon] != .colon {
            guard Self.isTokenByte(buffer[colon]) else { throw .malformedHeaderField }
            colon += 1
        }
        guard colon < line.upperBound, colon > line.lowerBound else { throw .malformedHeaderField }
        let name = line.lowerBound..<colon
        let value = try trimmedValue((colon + 1)..<line.upperBound)
        // Trailers are checked but never change framing or the headers a caller sees.
        if isTrailer || current.status < 200 { return }

        if matches(name, "content-length") {
            try addContentLength(value)
        } else if matches(name, "transfer-encoding") {
            try addTransferCodings(value)
        } else if matches(name, "connection") {
            var position = value.lowerBound
            while let element = listElement(in: value, from: &position) {
                if matches(element, "close") { current.connectionClose = true }
                if matches(element, "keep-alive") { current.connectionKeepAlive = true }
            }
        }
        current.headers.append(
            (String(decoding: buffer[name], as: UTF8.self), String(decoding: buffer[value], as: UTF8.self)))
    }

    /// The value without surrounding spaces and tabs; only visible characters, spaces, tabs and obs-text inside.
    private func trimmedValue(_ range: Range<Int>) throws(HTTP1ParseError) -> Range<Int> {
        var start = range.lowerBound
        var end = range.upperBound
        while start < end, buffer[start] == .space || buffer[start] == .tab { start += 1 }
        while end > start, buffer[end - 1] == .space || buffer[end - 1] == .tab { end -= 1 }
        for i in start..<end where !Self.isFieldValueByte(buffer[i]) { throw .malformedHeaderField }
        return start..<end
    }

    /// Content-Length, possibly repeated or a list (`42, 42`): every value must be the same number.
    private mutating func addContentLength(_ value: Range<Int>) throws(HTTP1ParseError) {
        var position = value.lowerBound
        var elements = 0
        while let element = listElement(in: value, from: &position) {
            elements += 1
            guard let length = decimal(element) else { throw .invalidContentLength }
            if let existing = current.contentLength, existing != length { throw .conflictingContentLength }
            current.contentLength = length
        }
        if elements == 0 { throw .invalidContentLength }
    }

    /// Transfer-Encoding across all its lines must be exactly `chunked` (we decode no other coding).
    private mutating func addTransferCodings(_ value: Range<Int>) throws(HTTP1ParseError) {
        current.hasTransferEncoding = true
        var position = value.lowerBound
        var elements = 0
        while let element = listElement(in: value, from: &position) {
            // Empty list elements are ignored (RFC 9110 §5.6.1).
            if element.isEmpty { continue }
            elements += 1
            guard matches(element, "chunked"), !current.isChunked else { throw .unsupportedTransferCoding }
            current.isChunked = true
        }
        if elements == 0 { throw .unsupportedTransferCoding }
    }

    /// The comma-separated element of a header value that starts at `position`, trimmed, moving
    /// `position` past it; nil after the last. Empty elements (`a,,b`, `42,`) come back as empty
    /// ranges for the caller to judge.
    private func listElement(in value: Range<Int>, from position: inout Int) -> Range<Int>? {
        guard !value.isEmpty, position <= value.upperBound else { return nil }
        var end = position
        while end < value.upperBound, buffer[end] != .comma { end += 1 }
        var a = position
        var b = end
        while a < b, buffer[a] == .space || buffer[a] == .tab { a += 1 }
        while b > a, buffer[b - 1] == .space || buffer[b - 1] == .tab { b -= 1 }
        position = end + 1
        return a..<b
    }

    private func decimal(_ range: Range<Int>) -> Int? {
        guard !range.isEmpty else { return nil }
        var value = 0
        for i in range {
            let digit = buffer[i] &- .zero
            guard digit < 10 else { return nil }
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(Int(digit))
            guard !o1, !o2 else { return nil }
            value = sum
        }
        return value
    }

    /// `1*HEXDIG [ BWS ";" extensions ]`; extensions are checked for stray control bytes and ignored.
    private func parseChunkSize(_ line: Range<Int>) throws(HTTP1ParseError) -> Int {
        var i = line.lowerBound
        var size = 0
        while i < line.upperBound, let digit = HexDigit.value(buffer[i]).map(Int.init) {
            guard size <= (Int.max - digit) / 16 else { throw .malformedChunk }
            size = size * 16 + digit
            i += 1
        }
        guard i > line.lowerBound else { throw .malformedChunk }
        while i < line.upperBound, buffer[i] == .space || buffer[i] == .tab { i += 1 }
        if i < line.upperBound {
            guard buffer[i] == .semicolon else { throw .malformedChunk }
            for k in (i + 1)..<line.upperBound where !Self.isFieldValueByte(buffer[k]) { throw .malformedChunk }
        }
        return size
    }

    // MARK: - Byte classes

    /// Compares with a lowercase ASCII name, ignoring case. Only used on token and
    /// checked value bytes, where `| 0x20` folds exactly the letters onto lowercase.
    private func matches(_ range: Range<Int>, _ name: StaticString) -> Bool {
        guard range.count == name.utf8CodeUnitCount else { return false }
        let expected = name.utf8Start
        for k in 0..<range.count where buffer[range.lowerBound + k] | 0x20 != expected[k] { return false }
        return true
    }

    /// tchar (RFC 9110 §5.6.2).
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"),
            UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// VCHAR, SP, HTAB or obs-text: what a field value or reason phrase may hold.
    static func isFieldValueByte(_ byte: UInt8) -> Bool {
        byte == .tab || (byte >= 0x20 && byte != 0x7F)
    }

}

extension UInt8 {
    fileprivate static var cr: UInt8 { 13 }
    fileprivate static var lf: UInt8 { 10 }
    fileprivate static var space: UInt8 { 32 }
    fileprivate static var tab: UInt8 { 9 }
    fileprivate static var colon: UInt8 { 58 }
    fileprivate static var comma: UInt8 { 44 }
    fileprivate static var semicolon: UInt8 { 59 }
    fileprivate static var zero: UInt8 { 48 }
    fileprivate static var one: UInt8 { 49 }
}

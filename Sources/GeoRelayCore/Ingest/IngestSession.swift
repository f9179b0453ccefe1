/// The clocks ingest judges by, injected so a test (or the fuzzer) runs on its own time.
package struct IngestClock: Sendable {
    /// The wall clock a fix time is judged against (never stepping back: see `init(_:)`).
    package var wallMs: @Sendable () -> Int64
    /// The monotonic clock that quiet fix cycles and a receiver's silence are measured by.
    package var monotonicMs: @Sendable () -> Int64

    package init(wallMs: @escaping @Sendable () -> Int64, monotonicMs: @escaping @Sendable () -> Int64) {
        self.wallMs = wallMs
        self.monotonicMs = monotonicMs
    }

    /// The relay's clock as ingest reads it. Its wall time never goes back behind where the
    /// monotonic time has carried it since this was made (at the relay's start): a clock set
    /// back (NTP, an operator) must not make the fixes of collectors that were right all along
    /// look as if they came from the future. A step forward is taken at once.
    package init(_ clock: any RelayClock) {
        let startWallMs = clock.nowMs()
        let startNs = clock.monotonicNs()
        wallMs = {
            let carried = Int64(clamping: (clock.monotonicNs() &- startNs) / 1_000_000)
            return max(clock.nowMs(), startWallMs.saturatingPlus(carried))
        }
        monotonicMs = { clock.monotonicMs() }
    }

    /// The system's clocks.
    package static let system = IngestClock(SystemClock())
}

/// One collector's conversation with the relay, or one phone request: how a line becomes a
/// stored position, in one place for the socket's event loop, the phone listener and the fuzzer.
///
/// A state machine without I/O. It takes a line (`receive(line:)`), a phone's request
/// (`receive(phone:)`), the passing of time (`tick()`), the end of input (`finish()`) and the
/// spool's answer (`stored(_:_:)`), and returns what to do: store these positions (the
/// receiver's, and the device's copy when the `SourceRouter` makes this receiver the active
/// one) or count a rejection. Everything else it keeps itself: the hello's device and acks, the
/// NMEA fix cycle being assembled, and the replies in line order, each one either known at once
/// (`skip hello`, `err parse …`), waiting for its commit, or waiting for its fix cycle to end
/// (a cycle's lines all get its position's `ok`). `collectReplies(into:)` hands out those at the
/// head that are known.
///
/// Validation happens here and only here: every position, whatever form it came in, is checked
/// by `LineDecoder.validate` against the injected wall clock just before it is stored.
package struct IngestSession: Sendable {
    /// What every session of the relay shares.
    package struct Rules: Sendable {
        package var decoder: LineDecoder
        /// Multi-source devices; nil when the configuration has none.
        package var router: SourceRouter?
        package var clock: IngestClock
        /// A longer line is refused (`too-long`).
        package var maxLineBytes: Int
        /// Metres of accuracy per unit of HDOP for NMEA fixes, when configured.
        package var nmeaAccuracyPerHDOP: Double?
        /// A fix cycle with no new sentence for this long is complete.
        package var nmeaQuietMs: Int64 = 1500
        /// The phone port's admission, when it listens: phones are held to it, and the socket
        /// tells it which ids collectors feed.
        package var phones: PhoneAdmission?

        package init(
            decoder: LineDecoder, router: SourceRouter? = nil, clock: IngestClock = .system,
            maxLineBytes: Int, nmeaAccuracyPerHDOP: Double? = nil
        ) {
            self.decoder = decoder
            self.router = router
            self.clock = clock
            self.maxLineBytes = maxLineBytes
            self.nmeaAccuracyPerHDOP = nmeaAccuracyPerHDOP
        }
    }

    /// Which replies a commit answers: one line's, every line of a fix cycle, or none (acks off,
    /// a phone, whose HTTP answer is its own).
    package struct Ticket: Sendable, Equatable {
        package var lines: [UInt64]
    }

    /// What the caller does next.
    package enum Action: Sendable, Equatable {
        /// Store these positions in one commit, then pass the first one's result to
        /// `stored(_:_:)` with the ticket: that answers the lines it stands for.
        case store([Position], Ticket)
        /// A line or request was refused: count it under its code. `log` is the warning to log
        /// (rate-limited) when nobody is told otherwise (acks off); nil when the refusal is
        /// answered as a reply, or belongs to a fix cycle.
        case reject(IngestError, log: String?)
    }

    /// A phone's request, as the OsmAnd port receives it.
    package struct PhoneRequest: Sendable {
        /// The body is the JSON of current Traccar Client apps (`Content-Type: application/json`).
        package var isJSON: Bool
        /// The request target (`/?id=…&lat=…`).
        package var target: String
        package var body: [UInt8]

        package init(isJSON: Bool, target: String, body: [UInt8]) {
            self.isJSON = isJSON
            self.target = target
            self.body = body
        }
    }

    package let rules: Rules
    /// The hello's device, for lines that name none.
    package private(set) var device: String?
    package private(set) var acks = false
    private var nmea: NMEAAssembler
    /// The receiver's sky and fixes for its vessel's integrity watch (nil: the router does not
    /// judge it), decided once per device the session speaks for.
    private var watched: (device: String, watch: ReceiverWatch?)?
    /// Reply slots of the lines of the fix cycle held open, and since when (monotonic).
    private var held: [UInt64] = []
    package private(set) var heldSinceMs: Int64?
    private var replies = ReplyQueue()
    /// Each gpsd receiver's last sky (`SKY`) and when it came (monotonic ms), for its next fixes.
    private var skies: [String: (sky: GNSSSample.Sky, atMs: Int64)] = [:]
    /// A sky older than this is not the fix's: the receiver stopped reporting it.
    static let skyFreshMs: Int64 = 3_000
    /// Receivers one session keeps a sky for (gpsd multiplexes a few): a bound on what input can grow.
    static let maximumSkies = 32

    package init(rules: Rules) {
        self.rules = rules
        nmea = NMEAAssembler(accuracyPerHDOP: rules.nmeaAccuracyPerHDOP)
    }

    /// Replies waiting for a commit or a fix cycle.
    package var unresolved: Int { replies.unresolved }
    /// A fix cycle is held open: `tick()` ends it once the receiver has been quiet long enough.
    package var holdsCycle: Bool { heldSinceMs != nil }

    // MARK: - Lines

    /// One line, without its newline (a trailing CR is dropped here).
    package mutating func receive(line raw: UnsafeBufferPointer<UInt8>) -> [Action] {
        var line = raw
        if let last = line.last, last == 0x0D { line = UnsafeBufferPointer(rebasing: line[0..<(line.count - 1)]) }
        if line.count > rules.maxLineBytes {
            return [
                refuse(
                    .tooLong("line of \(line.count) bytes is longer than \(rules.maxLineBytes) (ingest.maxLineBytes)"),
                    line: line)
            ]
        }
        do throws(IngestError) {
            switch try rules.decoder.decode(line, defaultDevice: device) {
            case .position(let position):
                let positions = try validatedAndRouted(position, observe: true)
                let slot = acks ? replies.add(nil) : nil
                return [.store(positions, Ticket(lines: slot.map { [$0] } ?? []))]
            case .nmea(let sentence):
                return feed(sentence)
            case .hello(let named, let ack):
                if let named { device = named }
                if let ack { acks = ack }
                if acks { replies.add("skip hello") }
                return []
            case .skip(let reason):
                if acks { replies.add("skip \(reason)") }
                return []
            case .gnss(let named, let report):
                // Nothing is stored: a report of no named receiver is judged by nobody, not refused.
                if let named, !named.isEmpty { observe(report, of: named) }
                if acks { replies.add(report == .noFix ? "skip no-fix" : "skip sky") }
                return []
            }
        } catch {
            return [refuse(error, line: line)]
        }
    }

    /// A line longer than `maxLineBytes` that the caller stopped reading (it skips to the newline).
    package mutating func refuseOverlongLine() -> Action {
        refuse(.tooLong("line longer than \(rules.maxLineBytes) bytes (ingest.maxLineBytes)"), line: nil)
    }

    /// Time passed: ends a fix cycle whose receiver has gone quiet.
    package mutating func tick() -> [Action] {
        guard let since = heldSinceMs, rules.clock.monotonicMs() - since >= rules.nmeaQuietMs else { return [] }
        return endCycle()
    }

    /// The collector stopped sending: a fix cycle nobody completed ends now.
    package mutating func finish() -> [Action] {
        endCycle()
    }

    /// The spool's answer for a `store` action's first position: the seq it is stored under
    /// (new, or the one a resend of it already had), or why it could not be.
    package mutating func stored(_ ticket: Ticket, _ result: Result<Int64, IngestError>) {
        let reply: String
        switch result {
        case .success(let seq): reply = "ok \(seq)"
        case .failure(let error): reply = "err \(error.code) \(error.message)"
        }
        for line in ticket.lines { replies.resolve(line, reply) }
    }

    /// Moves every known reply at the head, in line order, into `output`, one per line.
    package mutating func collectReplies(into output: inout [UInt8]) {
        replies.collect(into: &output)
    }

    // MARK: - Phones

    /// One phone request: the position to store (routed as a collector's would be), or why not.
    package func receive(phone request: PhoneRequest) -> Action {
        do throws(IngestError) {
            let position: Position
            if request.isJSON {
                position = try TraccarClientJSON.decode(String(decoding: request.body, as: UTF8.self))
            } else {
                // As Traccar: the URL's parameters, or the body's when the URL has none.
                var query =
                    request.target.firstIndex(of: "?").map {
                        String(request.target[request.target.index(after: $0)...])
                    } ?? ""
                if query.isEmpty { query = String(decoding: request.body, as: UTF8.self) }
                position = try OsmAndQuery.decode(query, defaultDevice: nil)
            }
            if let refusal = rules.phones?.refusal(of: position.device) { throw refusal }
            return .store(try validatedAndRouted(position, fromPhone: true, observe: true), Ticket(lines: []))
        } catch {
            return .reject(error, log: nil)
        }
    }

    // MARK: - Storing

    /// The one place a position is validated and routed before it is stored: the position,
    /// and the device's copy when this receiver is the active one (stored in the same commit).
    /// - Parameter observe: whether the position is its receiver's fix cycle for the integrity
    ///   watch (a JSON line's, a phone's); an NMEA receiver's cycles reach it from its sentences.
    private func validatedAndRouted(_ position: Position, fromPhone: Bool = false, observe: Bool = false)
        throws(IngestError) -> [Position]
    {
        let position = try rules.decoder.validated(position, nowMs: rules.clock.wallMs())
        if !fromPhone { rules.phones?.socketFeeds(position.device) }
        if observe, let router = rules.router, router.watches(position.device) {
            let atMs = rules.clock.monotonicMs()
            router.observe(
                GNSSSample(
                    source: position.device, atMs: atMs,
                    fix: .init(
                        timeMs: position.timeMs, lat: position.lat, lon: position.lon, speed: position.speed,
                        course: position.course), sky: sky(of: position.device, atMs: atMs),
                    wallMs: rules.clock.wallMs()))
        }
        guard let routed = rules.router?.route(position, nowMs: rules.clock.monotonicMs()) else { return [position] }
        return [position, routed]
    }

    /// A gpsd receiver's sky, kept for its fixes, or its cycle without a fix, told to the watch.
    private mutating func observe(_ report: GNSSReport, of device: String) {
        guard let router = rules.router, router.watches(device) else { return }
        let atMs = rules.clock.monotonicMs()
        switch report {
        case .sky(let sky):
            if skies[device] == nil, skies.count >= Self.maximumSkies { skies.removeAll() }
            skies[device] = (sky, atMs)
        case .noFix:
            router.observe(
                GNSSSample(
                    source: device, atMs: atMs, fix: nil, sky: sky(of: device, atMs: atMs), wallMs: rules.clock.wallMs()
                ))
        }
    }

    /// `device`'s last gpsd sky, when it is recent enough to be the present one's.
    private func sky(of device: String, atMs: Int64) -> GNSSSample.Sky? {
        guard let kept = skies[device], atMs - kept.atMs <= Self.skyFreshMs else { return nil }
        return kept.sky
    }

    private mutating func refuse(_ error: IngestError, line: UnsafeBufferPointer<UInt8>?) -> Action {
        if acks {
            replies.add("err \(error.code) \(error.message)")
            return .reject(error, log: nil)
        }
        return .reject(error, log: Self.warning(error, line: line))
    }

    private static func warning(_ error: IngestError, line: UnsafeBufferPointer<UInt8>?) -> String {
        let excerpt = line.map { String(decoding: UnsafeBufferPointer(rebasing: $0.prefix(80)), as: UTF8.self) } ?? ""
        return "rejected line (\(error.code)): \(error.message)\(excerpt.isEmpty ? "" : " in \"\(excerpt)\"")"
    }

    // MARK: - NMEA fix cycles

    /// One sentence through the fix-cycle assembler: the line's answer waits while its cycle is
    /// incomplete, then every line of the cycle gets the position's `ok`.
    private mutating func feed(_ sentence: NMEASentence) -> [Action] {
        guard let device else { return [refuse(.device("NMEA sentences need a hello with a device first"), line: nil)] }
        if watched?.device != device {
            watched = (device, rules.router?.watches(device) == true ? ReceiverWatch(source: device) : nil)
        }
        if let router = rules.router, watched?.watch != nil,
            var sample = watched?.watch?.feed(sentence, atMs: rules.clock.monotonicMs())
        {
            sample.wallMs = rules.clock.wallMs()
            router.observe(sample)
        }
        var actions: [Action] = []
        for step in nmea.feed(sentence, device: device) {
            switch step {
            case .flush(let position):
                actions.append(emitCycle(position, extra: nil))
            case .hold:
                if acks { held.append(replies.add(nil)) }
                heldSinceMs = heldSinceMs ?? rules.clock.monotonicMs()
            case .complete(let position):
                actions.append(emitCycle(position, extra: acks ? replies.add(nil) : nil))
            case .skip(let reason):
                if acks { replies.add("skip \(reason)") }
            }
        }
        return actions
    }

    /// Stores a finished fix cycle, answering its held lines (and `extra`, the line that completed it).
    private mutating func emitCycle(_ position: Position, extra: UInt64?) -> Action {
        var lines = held
        if let extra { lines.append(extra) }
        held.removeAll()
        heldSinceMs = nil
        do throws(IngestError) {
            return .store(try validatedAndRouted(position), Ticket(lines: lines))
        } catch {
            for line in lines { replies.resolve(line, "err \(error.code) \(error.message)") }
            return .reject(error, log: nil)
        }
    }

    /// Ends a fix cycle nobody completed: the connection closed, or the receiver went quiet.
    private mutating func endCycle() -> [Action] {
        guard let device, nmea.hasPending || !held.isEmpty else { return [] }
        if let position = nmea.flush(device: device) { return [emitCycle(position, extra: nil)] }
        for line in held { replies.resolve(line, "skip no-fix") }
        held.removeAll()
        heldSinceMs = nil
        return []
    }
}

/// A session's replies in line order; `nil` while a line's answer is pending.
struct ReplyQueue: Sendable {
    private var slots: [String?] = []
    private var head = 0
    /// The line number of `slots[head]`.
    private var base: UInt64 = 0
    private(set) var unresolved = 0

    /// Appends a reply slot and returns its line number; `reply` nil means "pending".
    @discardableResult
    mutating func add(_ reply: String?) -> UInt64 {
        let number = base + UInt64(slots.count - head)
        slots.append(reply)
        if reply == nil { unresolved += 1 }
        return number
    }

    mutating func resolve(_ number: UInt64, _ reply: String) {
        guard number >= base else { return }
        let index = head + Int(number - base)
        guard index < slots.count, slots[index] == nil else { return }
        slots[index] = reply
        unresolved -= 1
    }

    /// Moves every resolved reply at the head into `output`.
    mutating func collect(into output: inout [UInt8]) {
        while head < slots.count, let reply = slots[head] {
            // A reply is one line whatever a quoted value held: a CR or LF let through here
            // would be taken for the next line's answer by a collector matching in order.
            output.append(contentsOf: ControlEscaping.escape(reply).utf8)
            output.append(0x0A)
            head += 1
            base += 1
        }
        if head > 1024, head * 2 > slots.count {
            slots.removeFirst(head)
            head = 0
        }
    }
}

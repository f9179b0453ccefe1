/// When the writer commits a group of positions: at once, or a little later with the
/// positions its usual company of collectors is about to send.
///
/// Each commit costs an fsync, and an fsync writes at least one 4 KiB block of the WAL to
/// the card however little changed: at four GPS units sending once a second each, one commit
/// per position is what wears an SD card out. PostgreSQL's `commit_delay` waits only while
/// `commit_siblings` other transactions are active; the same idea here, by device: a group
/// waits only for the devices that have appended within the last window (its company), and
/// commits as soon as each of them has a position in it, when the window ends, when it holds
/// an alarm or `maxPositions`, or when someone waits on it (a barrier or an operation). A
/// device sending alone (a phone uploading its backlog one request at a time, a test) never
/// waits; a burst fills groups at once; `ok` still means committed and synced.
struct CommitWindow: Sendable {
    /// The longest a position waits for company; zero commits every group at once.
    let lengthNs: UInt64
    /// A group this large commits without waiting.
    static let maxPositions = 512

    /// When each device last appended (monotonic ns); pruned of devices gone quiet.
    private var lastAppendNs: [String: UInt64] = [:]
    /// When the open group's first position arrived; nil while no group is open.
    private(set) var openedNs: UInt64?
    private var expected: Set<String> = []
    private var arrived: Set<String> = []
    private var positions = 0
    private var complete = false

    init(lengthNs: UInt64) {
        self.lengthNs = lengthNs
    }

    /// Notes an append of `count` positions from `devices`. Returns true when the group
    /// should commit now; otherwise it commits at `deadlineNs` at the latest.
    mutating func append(devices: Set<String>, count: Int, alarm: Bool, nowNs: UInt64) -> Bool {
        defer { for device in devices { lastAppendNs[device] = nowNs } }
        guard lengthNs > 0 else {
            complete = true
            return true
        }
        if openedNs == nil {
            openedNs = nowNs
            // The company: every device heard from within the last window, this one included.
            lastAppendNs = lastAppendNs.filter { nowNs &- $0.value < lengthNs * 4 }
            expected = Set(lastAppendNs.filter { nowNs &- $0.value < lengthNs }.keys).union(devices)
        }
        arrived.formUnion(devices)
        positions += count
        if alarm || positions >= Self.maxPositions || expected.isSubset(of: arrived) { complete = true }
        return complete
    }

    /// The latest the open group may wait, or nil when none is open.
    var deadlineNs: UInt64? { openedNs.map { $0 + lengthNs } }

    /// Whether the open group is due: complete, or its window is over.
    func isDue(nowNs: UInt64) -> Bool {
        if complete { return true }
        guard let deadlineNs else { return false }
        return nowNs >= deadlineNs
    }

    /// The group was taken for a commit: the next append opens a new one.
    mutating func close() {
        openedNs = nil
        expected.removeAll(keepingCapacity: true)
        arrived.removeAll(keepingCapacity: true)
        positions = 0
        complete = false
    }

}

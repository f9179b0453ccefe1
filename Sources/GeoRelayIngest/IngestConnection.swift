import CLinux
import Glibc
import GeoRelayCore

/// One collector's connection: its partial input line, its hello state, and
/// its replies, which go out strictly in the order of its lines.
///
/// Owned by the event loop thread; never shared.
final class IngestConnection {
    let id: UInt64
    /// Closed by the loop, after taking it out of epoll, so the number is never reused while watched.
    let socket: FileDescriptor
    var fd: Int32 { socket.number }
    var input: [UInt8] = []
    /// Skipping the rest of an overlong line up to its newline.
    var discarding = false
    var device: String?
    var acks = false
    /// The peer closed its sending side; close once every reply is out.
    var inputClosed = false
    var readPaused = false
    var wantsWrite = false
    /// NMEA: the fix cycle being assembled, and the reply slots of its lines.
    var nmea = NMEAAssembler()
    var nmeaHeld: [UInt64] = []
    var nmeaHeldSinceMs: Int64?

    /// Reply slots in line order; `nil` while the position's commit is pending.
    private var slots: [String?] = []
    private var slotHead = 0
    /// Index of `slots[0]` in the connection's line numbering.
    private(set) var slotBase: UInt64 = 0
    private(set) var unresolved = 0

    var output: [UInt8] = []
    var outputOffset = 0

    init(id: UInt64, socket: FileDescriptor) {
        self.id = id
        self.socket = socket
    }

    /// Appends a reply slot and returns its number; `reply` nil means "pending".
    func addSlot(_ reply: String?) -> UInt64 {
        let number = slotBase + UInt64(slots.count - slotHead)
        slots.append(reply)
        if reply == nil { unresolved += 1 }
        return number
    }

    func resolve(_ number: UInt64, _ reply: String) {
        guard number >= slotBase else { return }
        let index = slotHead + Int(number - slotBase)
        guard index < slots.count, slots[index] == nil else { return }
        slots[index] = reply
        unresolved -= 1
    }

    /// Moves every resolved reply at the head into the output buffer.
    func collectReplies() {
        while slotHead < slots.count, let reply = slots[slotHead] {
            output.append(contentsOf: reply.utf8)
            output.append(0x0A)
            slotHead += 1
            slotBase += 1
        }
        if slotHead > 1024, slotHead * 2 > slots.count {
            slots.removeFirst(slotHead)
            slotHead = 0
        }
    }

    var pendingOutput: Int { output.count - outputOffset }

    /// Writes what the socket takes now. Returns false on a hard error.
    func flush() -> Bool {
        while outputOffset < output.count {
            let sent = output.withUnsafeBytes { raw in
                Result { () throws(SystemError) in try socket.send(UnsafeRawBufferPointer(rebasing: raw[outputOffset...])) }
            }
            guard case .success(let result) = sent else { return false }
            guard case .processed(let n) = result else { break }
            // A zero-byte send of a non-empty buffer: nothing more will go out.
            guard n > 0 else { return false }
            outputOffset += n
        }
        if outputOffset == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 1 << 16)
            outputOffset = 0
        } else if outputOffset > 1 << 16 {
            output.removeFirst(outputOffset)
            outputOffset = 0
        }
        return true
    }

    /// Done: the peer stopped sending and every reply has been written.
    var finished: Bool { inputClosed && unresolved == 0 && pendingOutput == 0 }
}

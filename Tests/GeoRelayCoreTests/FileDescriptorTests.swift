import GeoRelayCore
import GeoRelayTestTraits
import Glibc
import Testing

/// A descriptor has one owner and is closed once: by `close()` or when the owner goes.
@Suite(.offThePool) struct FileDescriptorTests {
    /// The file a number refers to now, or nil when the number is not open.
    private func identity(_ number: Int32) -> (dev_t, ino_t)? {
        var info = stat()
        guard fstat(number, &info) == 0 else { return nil }
        return (info.st_dev, info.st_ino)
    }

    @Test func aSecondCloseDoesNotCloseTheFileThatReusedTheNumber() throws {
        let first = try FileDescriptor.open("/dev/null", O_RDONLY)
        let number = first.number
        try first.close()
        #expect(!first.isOpen && first.number == -1, "a closed descriptor gives up its number")
        // The kernel hands out the lowest free number: most likely the one just closed.
        let second = try FileDescriptor.open("/proc/self/stat", O_RDONLY)
        let secondIdentity = try #require(identity(second.number))
        try first.close()
        let after = try #require(
            identity(second.number), "the second close closed the file that took the number \(number)")
        #expect(after == secondIdentity)
    }

    @Test func theOwnerGoingClosesIt() throws {
        var owner: FileDescriptor? = try FileDescriptor.open("/dev/null", O_RDONLY)
        let number = owner!.number
        let before = try #require(identity(number))
        owner = nil
        // Closed, or already reused by another test's file: either way not /dev/null through this number.
        if let now = identity(number) { #expect(now != before) }
    }

    @Test func aReleasedNumberIsNotClosedByItsFormerOwner() throws {
        var owner: FileDescriptor? = try FileDescriptor.open("/dev/null", O_RDONLY)
        let number = owner!.release()
        let before = try #require(identity(number))
        owner = nil
        #expect(identity(number).map { $0 == before } == true, "released, so still open")
        close(number)
    }

    @Test func openFailuresSayWhat() {
        let error = #expect(throws: SystemError.self) { try FileDescriptor.open("/nonexistent/georelay", O_RDONLY) }
        #expect(error?.errno == ENOENT && error?.description.hasPrefix("open /nonexistent/georelay: ") == true)
    }

    @Test func opensCloseOnExec() throws {
        let file = try FileDescriptor.open("/dev/null", O_RDONLY)
        #expect(fcntl(file.number, F_GETFD) & FD_CLOEXEC != 0)
        let socket = try FileDescriptor.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue))
        #expect(fcntl(socket.number, F_GETFD) & FD_CLOEXEC != 0)
    }
}

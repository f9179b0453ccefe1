import Foundation
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The power-cut filesystem itself (`LazyFS`, `Tests/Helpers/lazyfs/lazyfs.c`): what survives a
/// cut is what was fsynced, file data by the file's fsync, names by the directory's.
@Suite(.offThePool) struct LazyFSTests {
    /// A mounted filesystem, or nil after saying why this machine cannot mount one.
    static func mounted(_ test: String = #function) throws -> LazyFS? {
        do {
            return try LazyFS()
        } catch let error as LazyFSUnavailable {
            print("lazyfs \(test): SKIPPED, \(error.reason)")
            return nil
        }
    }

    @Test func writesWithoutAnFsyncAreGoneAfterTheCut() throws {
        guard let fs = try Self.mounted() else { return }
        try write("v1", to: "\(fs.mountPoint)/kept", fsync: true)
        try syncDirectory(fs.mountPoint)
        try append(" and more", to: "\(fs.mountPoint)/kept", fsync: false)
        try write("never synced", to: "\(fs.mountPoint)/lost", fsync: false)
        #expect(try contents("\(fs.mountPoint)/kept") == "v1 and more", "before the cut the mount shows every write")
        fs.cut()
        try fs.remount()
        #expect(try contents("\(fs.mountPoint)/kept") == "v1")
        #expect(!exists("\(fs.mountPoint)/lost"))
        #expect(try contents("\(fs.backing)/kept") == "v1", "the backing directory holds what was durable")
    }

    @Test func anFsyncedFileWhoseDirectoryWasNotSyncedIsGone() throws {
        guard let fs = try Self.mounted() else { return }
        try write("data", to: "\(fs.mountPoint)/new", fsync: true)
        fs.cut()
        try fs.remount()
        #expect(!exists("\(fs.mountPoint)/new"))
        // The mounted daemon's store of unnamed files is all the backing directory holds, and it is empty.
        #expect(try FileManager.default.contentsOfDirectory(atPath: fs.backing) == [".lazyfs"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: "\(fs.backing)/.lazyfs").isEmpty)
    }

    /// The classic: write a temporary file, fsync it, rename it over the old one. Without an
    /// fsync of the directory the rename is undone by the cut; with one it stays.
    @Test(arguments: [false, true]) func aRenameNeedsTheDirectorysFsync(syncAfterRename: Bool) throws {
        guard let fs = try Self.mounted() else { return }
        let path = "\(fs.mountPoint)/token"
        try write("old", to: path, fsync: true)
        try syncDirectory(fs.mountPoint)
        try write("new", to: path + ".tmp", fsync: true)
        #expect(rename(path + ".tmp", path) == 0)
        if syncAfterRename { try syncDirectory(fs.mountPoint) }
        fs.cut()
        try fs.remount()
        #expect(try contents(path) == (syncAfterRename ? "new" : "old"))
        #expect(!exists(path + ".tmp"))
    }

    /// A name made durable points at the file as durable as its own fsyncs made it: renamed
    /// into place without an fsync of the data, it is there but empty.
    @Test func aDurableNameOverUnsyncedDataIsAnEmptyFile() throws {
        guard let fs = try Self.mounted() else { return }
        try write("unsynced", to: "\(fs.mountPoint)/f.tmp", fsync: false)
        #expect(rename("\(fs.mountPoint)/f.tmp", "\(fs.mountPoint)/f") == 0)
        try syncDirectory(fs.mountPoint)
        fs.cut()
        try fs.remount()
        #expect(try contents("\(fs.mountPoint)/f") == "")
    }

    @Test func anUnlinkWithoutTheDirectorysFsyncComesBack() throws {
        guard let fs = try Self.mounted() else { return }
        try write("here", to: "\(fs.mountPoint)/a", fsync: true)
        try syncDirectory(fs.mountPoint)
        #expect(unlink("\(fs.mountPoint)/a") == 0)
        #expect(!exists("\(fs.mountPoint)/a"))
        fs.cut()
        try fs.remount()
        #expect(try contents("\(fs.mountPoint)/a") == "here")
    }

    /// Truncating and writing past a hole: zeros in the hole, before and after an fsync; the
    /// old contents after a cut that came first.
    @Test func truncationsAreLazyAndHolesReadAsZeros() throws {
        guard let fs = try Self.mounted() else { return }
        let path = "\(fs.mountPoint)/t"
        let original = String(repeating: "x", count: 10_000)
        try write(original, to: path, fsync: true)
        try syncDirectory(fs.mountPoint)
        let fd = open(path, O_RDWR)
        #expect(ftruncate(fd, 100) == 0)
        #expect(pwrite(fd, "end", 3, 5_000) == 3)
        close(fd)
        let expected = String(repeating: "x", count: 100) + String(repeating: "\0", count: 4_900) + "end"
        #expect(try contents(path) == expected)
        fs.cut()
        try fs.remount()
        #expect(try contents(path) == original)
        let again = open(path, O_RDWR)
        #expect(ftruncate(again, 100) == 0)
        #expect(pwrite(again, "end", 3, 5_000) == 3)
        #expect(fdatasync(again) == 0)
        close(again)
        fs.cut()
        try fs.remount()
        #expect(try contents(path) == expected)
    }

    @Test func aCleanUnmountKeepsEverything() throws {
        guard let fs = try Self.mounted() else { return }
        try write("unsynced", to: "\(fs.mountPoint)/a", fsync: false)
        #expect(mkdir("\(fs.mountPoint)/sub", 0o700) == 0)
        try write("deep", to: "\(fs.mountPoint)/sub/b", fsync: false)
        try fs.unmount()
        try fs.mount()
        #expect(try contents("\(fs.mountPoint)/a") == "unsynced")
        #expect(try contents("\(fs.mountPoint)/sub/b") == "deep")
    }

    /// Many blocks, some written twice, read back across block edges before and after.
    @Test func largeUnalignedWritesReadBackExactly() throws {
        guard let fs = try Self.mounted() else { return }
        let path = "\(fs.mountPoint)/big"
        var generator = SystemRandomNumberGenerator()
        var expected = [UInt8](repeating: 0, count: 300_000)
        let fd = open(path, O_CREAT | O_RDWR, 0o600)
        defer { close(fd) }
        for round in 0..<200 {
            let offset = Int.random(in: 0..<(expected.count - 5_000), using: &generator)
            let length = Int.random(in: 1...5_000, using: &generator)
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, length, off_t(offset)) } == length)
            expected.replaceSubrange(offset..<(offset + length), with: bytes)
            if round == 100 { #expect(fsync(fd) == 0) }
        }
        let size = Int(lseek(fd, 0, SEEK_END))
        #expect(fsync(fd) == 0)
        try syncDirectory(fs.mountPoint)
        fs.cut()
        try fs.remount()
        let back = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(back.count == size)
        #expect(Array(back) == Array(expected.prefix(size)))
    }
}

// MARK: - Plain system calls, so that what is fsynced is exactly what the test says

private func write(_ text: String, to path: String, fsync sync: Bool) throws {
    let fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0o600)
    guard fd >= 0 else { throw RelayProcessError(message: "open \(path): errno \(errno)") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
        throw RelayProcessError(message: "write \(path): errno \(errno)")
    }
    if sync, fsync(fd) != 0 { throw RelayProcessError(message: "fsync \(path): errno \(errno)") }
}

private func append(_ text: String, to path: String, fsync sync: Bool) throws {
    let fd = open(path, O_WRONLY | O_APPEND)
    guard fd >= 0 else { throw RelayProcessError(message: "open \(path): errno \(errno)") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
        throw RelayProcessError(message: "write \(path): errno \(errno)")
    }
    if sync, fsync(fd) != 0 { throw RelayProcessError(message: "fsync \(path): errno \(errno)") }
}

func syncDirectory(_ path: String) throws {
    let fd = open(path, O_RDONLY | O_DIRECTORY)
    guard fd >= 0 else { throw RelayProcessError(message: "open \(path): errno \(errno)") }
    defer { close(fd) }
    guard fsync(fd) == 0 else { throw RelayProcessError(message: "fsync \(path): errno \(errno)") }
}

private func contents(_ path: String) throws -> String {
    try String(contentsOfFile: path, encoding: .utf8)
}

private func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

import Foundation
import GeoRelayTestTraits
import Synchronization
import Testing

@testable import GeoRelayCore

/// What the relay took from Foundation, now its own (the binary links FoundationEssentials only):
/// each checked against Foundation's answer where the test can still ask it.
@Suite(.offThePool) struct PlatformTests {
    /// As `NSString.deletingLastPathComponent` answers (asked by hand: Foundation's own crashes on
    /// some of these in this toolchain).
    @Test(arguments: [
        ("/a/b/c", "/a/b"), ("/a/b/c/", "/a/b"), ("/c", "/"), ("c", ""), ("", ""), ("/", "/"), ("a/b", "a"),
        ("/a//b", "/a"), ("relative/dir/georelay.sock", "relative/dir"),
        ("/run/georelay/georelay.sock", "/run/georelay"),
    ])
    func aPathsDirectory(path: String, directory: String) {
        #expect(Paths.directory(of: path) == directory, "\(path)")
    }

    /// As `NSString.standardizingPath` answers for an absolute path without symbolic links.
    @Test(arguments: [
        ("/run/georelay/georelay.sock", "/run/georelay/georelay.sock"), ("/a/./b/../c", "/a/c"), ("/a//b/", "/a/b"),
        ("/../a", "/a"), ("/a/b/..", "/a"), ("/", "/"), ("/var/x/./../y/z.sock", "/var/y/z.sock"),
    ])
    func anAbsolutePathsStandardForm(path: String, standard: String) {
        #expect(Paths.standardized(path) == standard, "\(path)")
    }

    /// `%.1f` where the value is not a tie; a tie rounds half away from zero (printf rounds the
    /// binary value, so 0.95 is 0.9 there), and no "-0.0".
    @Test func oneDecimalIsPrintfsAwayFromTies() {
        for value in [0, 0.04, 0.06, 0.949, 1, 1.26, 9.99, 10.04, 123.456, 1023.9, 99_999.94, -1.26, 512.49] {
            #expect(oneDecimal(value) == String(format: "%.1f", value), "\(value)")
        }
        #expect(oneDecimal(0.25) == "0.3")
        // 35,072 bytes: the status page's `toFixed` shows "34.3 KiB", and `georelay status` must too.
        #expect(oneDecimal(35_072 / 1024) == "34.3")
        #expect(oneDecimal(-0.04) == "0.0")
    }

    @Test func trimmingAndPadding() {
        #expect("  a b \t\n".trimmingWhitespace == "a b")
        #expect("\n".trimmingWhitespace == "")
        #expect("abc".padded(to: 5) == "abc  ")
        #expect("abcdef".padded(to: 3) == "abc")
    }

    @Test func aThreadRunsAndIsNamed() async {
        let name = Mutex<String?>(nil)
        let done = WakeSignal()
        startThread(named: "georelay-test-thread-long-name") {
            let comm = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
            name.withLock { $0 = comm?.trimmingWhitespace }
            done.signal()
        }
        await done.wait(timeout: .seconds(10))
        #expect(name.withLock { $0 } == "georelay-test-t", "the kernel keeps 15 bytes of a name")
    }

    @Test func fileStatusAndOutput() throws {
        let path = NSTemporaryDirectory() + "georelay-platform-\(getpid())"
        defer { unlink(path) }
        let output = try FileOutput(creatingAt: path)
        output.write("12345")
        output.close()
        #expect(FileStatus.size(atPath: path) == 5)
        #expect(
            FileStatus.permissions(atPath: path)
                == (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue)
        #expect(FileStatus.size(atPath: path + ".missing") == nil)
    }
}

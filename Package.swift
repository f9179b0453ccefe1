// swift-tools-version:6.0
import PackageDescription

/// georelay: an offline-first store-and-forward relay for GPS positions.
///
/// The core is split into targets along the path a position takes
/// (core model → spool → ingest / forward → service) so that the compiler
/// guards the direction: ingest cannot reach the forwarder, and the spool
/// cannot know its readers.
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6)
]

let package = Package(
    name: "georelay",
    products: [
        .executable(name: "georelay", targets: ["georelay"]),
        .executable(name: "georelay-bench", targets: ["georelay-bench"]),
    ],
    targets: [
        // System C libraries: a module map and a shim header each.
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        // gzip, the push destination's fallback encoding when a server refuses zstd.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // Linux system calls that Glibc's Swift module does not export (epoll, eventfd, adjtimex, statvfs).
        .systemLibrary(name: "CLinux"),

        // Positions, their codecs, configuration and small runtime helpers.
        .target(name: "GeoRelayCore", dependencies: ["CLinux"], swiftSettings: swiftSettings),
        // The durable SQLite spool and every destination's delivery state.
        .target(name: "GeoRelaySpool", dependencies: ["GeoRelayCore", "CSQLite"], swiftSettings: swiftSettings),
        // The relay's own HTTP/1.1 server (and the epoll loop it shares with ingest): the phone
        // port's and the metrics port's listener, knowing neither of them.
        .target(name: "GeoRelayHTTP", dependencies: ["GeoRelayCore", "CLinux"], swiftSettings: swiftSettings),
        // The Unix-socket line protocol and the phone port, feeding the spool.
        .target(
            name: "GeoRelayIngest", dependencies: ["GeoRelayCore", "GeoRelaySpool", "GeoRelayHTTP", "CLinux"],
            swiftSettings: swiftSettings),
        // Destinations: HTTP through libcurl, the Traccar (OsmAnd) codec, backoff and probing.
        .target(
            name: "GeoRelayForward", dependencies: ["GeoRelayCore", "GeoRelaySpool", "CCurl", "CZstd", "CZlib"],
            swiftSettings: swiftSettings),
        // Collectors: a GPS unit's serial, network, gpsd or file source into the socket.
        .target(name: "GeoRelayCollect", dependencies: ["GeoRelayCore", "CLinux"], swiftSettings: swiftSettings),
        // The daemon's lifecycle and the commands: wires the parts together.
        .target(
            name: "GeoRelayService",
            dependencies: [
                "GeoRelayCore", "GeoRelaySpool", "GeoRelayIngest", "GeoRelayHTTP", "GeoRelayForward", "GeoRelayCollect",
                "CLinux",
            ], swiftSettings: swiftSettings),
        // The thin executable: argument parsing only.
        .executableTarget(name: "georelay", dependencies: ["GeoRelayService"], swiftSettings: swiftSettings),

        // Fakes of the remote servers, shared by tests and benchmarks.
        .target(
            name: "GeoRelayTestKit", dependencies: ["GeoRelayCore", "GeoRelayForward", "CLinux", "CZstd", "CZlib"],
            swiftSettings: swiftSettings),
        // The suite trait that keeps every test's body off the shared pool (imports Testing).
        .target(name: "GeoRelayTestTraits", dependencies: ["GeoRelayTestKit"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "georelay-bench",
            dependencies: ["GeoRelayService", "GeoRelayForward", "GeoRelayTestKit", "GeoRelaySpool"],
            swiftSettings: swiftSettings),

        .testTarget(
            name: "GeoRelayCoreTests", dependencies: ["GeoRelayCore", "GeoRelayTestKit", "GeoRelayTestTraits"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "GeoRelaySpoolTests", dependencies: ["GeoRelaySpool", "GeoRelayTestTraits"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "GeoRelayHTTPTests", dependencies: ["GeoRelayHTTP", "GeoRelayTestKit", "GeoRelayTestTraits"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "GeoRelayIngestTests", dependencies: ["GeoRelayIngest", "GeoRelayTestKit", "GeoRelayTestTraits"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "GeoRelayForwardTests", dependencies: ["GeoRelayForward", "GeoRelayTestKit", "GeoRelayTestTraits"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "GeoRelayServiceTests",
            dependencies: ["GeoRelayService", "GeoRelaySpool", "GeoRelayTestKit", "GeoRelayTestTraits"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "SimulationTests",
            dependencies: [
                "GeoRelayForward", "GeoRelayService", "GeoRelaySpool", "GeoRelayTestKit", "GeoRelayTestTraits",
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "GeoRelayService", "GeoRelaySpool", "GeoRelayForward", "GeoRelayTestKit", "GeoRelayTestTraits",
            ], swiftSettings: swiftSettings),
    ]
)

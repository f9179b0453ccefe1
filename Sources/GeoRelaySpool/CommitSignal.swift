import GeoRelayCore

/// Wakes the forwarders when new positions are committed.
package typealias CommitSignal = WakeBroadcast

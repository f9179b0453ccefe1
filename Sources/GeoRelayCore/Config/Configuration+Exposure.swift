import FoundationEssentials
import Glibc

/// Secrets written into the configuration file itself, and whether other users can read them.
extension Configuration {
    /// The keys that hold a secret in plain text: a literal `apiKey` or `auth.token`, or a URL
    /// with credentials in it. A secret read from the environment or a file of its own is not one.
    package var plainSecretKeys: [String] {
        var keys: [String] = []
        for (index, destination) in destinations.enumerated() {
            let at = "destinations[\(index)]"
            if Self.hasCredentials(destination.url) { keys.append("\(at).url") }
            if let probe = destination.probeURL, Self.hasCredentials(probe) { keys.append("\(at).probe.url") }
            if let push = destination.push {
                if case .literal? = push.apiKey?.source { keys.append("\(at).apiKey") }
                if case .literal? = push.token?.source { keys.append("\(at).auth.token") }
            }
        }
        return keys
    }

    /// A warning when the file at `path` holds secrets in plain text and users other than its
    /// owner and group can read it; nil when it is fine (or cannot be examined).
    package func exposureWarning(path: String) -> String? {
        let keys = plainSecretKeys
        guard !keys.isEmpty, let mode = FileStatus.permissions(atPath: path), mode & 0o004 != 0 else { return nil }
        return
            "\(path) holds secrets in plain text (\(keys.joined(separator: ", "))) and every user of this machine can read it "
            + "(mode \(String(mode & 0o777, radix: 8))): chmod o-r \(path), or move them to { env: ... } or { file: ... }"
    }

    private static func hasCredentials(_ url: String) -> Bool {
        guard let components = URLComponents(string: url) else { return false }
        return components.user != nil || components.password != nil
    }
}

import GeoRelayCore
import GeoRelayHTTP
import Glibc

/// Which `Host` the status page answers: the page and `/status.json` carry the vessel's position,
/// and a web page on any site can make a crew member's browser ask a name it controls that it
/// then points at the relay's address (DNS rebinding). The browser sends that name as `Host`;
/// the page answers only names that are this box: the address the request reached, `localhost`,
/// the host name (and its `.local` mDNS name), and the names `ui.hosts` lists (a name on the
/// boat's own DNS). A request without `Host` (HTTP/1.0, a script) is no browser's and is answered.
enum HostCheck {
    static func allows(_ request: HTTPListener.Request, names: [String]) -> Bool {
        guard let host = request.header("host") else { return true }
        let name = hostName(host).lowercased()
        if name.isEmpty { return true }
        if name == request.localAddress || name == "localhost" || name == "127.0.0.1" || names.contains(name) {
            return true
        }
        let own = ownName
        return !own.isEmpty && (name == own || name == own + ".local" || own.hasPrefix(name + "."))
    }

    /// The box's host name, read once with `gethostname` (no DNS lookup on a request's path).
    static let ownName: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self).lowercased()
    }()

    /// The host without its port (`[::1]:8080` keeps the brackets' content).
    static func hostName(_ host: String) -> String {
        let text = host.trimmingWhitespace
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            return String(text[text.index(after: text.startIndex)..<close])
        }
        if let colon = text.lastIndex(of: ":") { return String(text[..<colon]) }
        return text
    }
}

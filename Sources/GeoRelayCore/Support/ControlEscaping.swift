/// Makes text from outside safe to put on a line: a socket reply, a log line, a terminal.
///
/// A value quoted back (`err parse lat: "1\nok 99" is not a number`) must not end the
/// reply line, or a collector that matches replies to lines in order takes the second
/// half for an answer; a log line must not start a forged `<0>` journald line or move a
/// terminal's cursor. Every C0 control (tab too), DEL and every C1 control become
/// visible escapes (`\n`, `\r`, `\t`, `\x1b`, `\u{85}`), and so do the Unicode line and
/// paragraph separators some terminals and log viewers break lines at. The backslash
/// itself is left alone: the escape is for a reader's eyes, not meant to be undone.
package enum ControlEscaping {
    /// Whether `text` holds nothing that needs escaping: the fast path of every log line.
    @inline(__always)
    package static func isClean(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F && $0 != 0xC2 && $0 != 0xE2 }
            || !text.unicodeScalars.contains(where: needsEscape)
    }

    /// `text` with every control character made visible; itself when it holds none.
    package static func escape(_ text: String) -> String {
        if isClean(text) { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                let hex = String(scalar.value, radix: 16)
                out += scalar.value <= 0x7F ? "\\x" + (hex.count < 2 ? "0" : "") + hex : "\\u{\(hex)}"
            }
        }
        return out
    }

    /// A screen of lines for a terminal: every line escaped, the line breaks kept. A device id
    /// or an attribute an older spool holds (`\u{1b}[2J`) shows as text instead of clearing the
    /// crew's screen.
    package static func escapeLines(_ text: String) -> String {
        if isClean(text.replacing("\n", with: "")) { return text }
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { escape(String($0)) }.joined(
            separator: "\n")
    }

    /// C0, DEL, C1, and U+2028/U+2029 (line and paragraph separator).
    @inline(__always)
    package static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        return v < 0x20 || (0x7F...0x9F).contains(v) || v == 0x2028 || v == 0x2029
    }

    /// Whether `text` holds any control character: identifiers (device ids, alarm names,
    /// attribute names) with one are refused at the door rather than escaped forever after.
    package static func containsControl(_ text: String) -> Bool {
        !isClean(text)
    }
}

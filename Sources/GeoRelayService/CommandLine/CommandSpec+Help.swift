/// `georelay <command> --help`, written from the description the parser uses.
extension CommandSpec {
    /// `usage: georelay duty on|off [--destination NAME] [--config PATH]`: required words
    /// first, then required options, the other options, and the optional words last.
    package var usageLine: String {
        var parts = ["usage: georelay", name]
        parts += positionals.filter(\.required).map { $0.choices.joined(separator: "|") }
        func text(_ option: OptionSpec) -> String {
            option.kind.placeholder.map { "\(option.name) \($0)" } ?? option.name
        }
        // Options of which at most one may be given share a bracket: `[--json | --watch]`.
        let groups = constraints.compactMap { constraint -> [String]? in
            guard case .atMostOne(let names) = constraint else { return nil }
            return names
        }
        var shown: Set<String> = []
        for option in options.filter(\.required) + options.filter({ !$0.required }) where !shown.contains(option.name) {
            if option.required {
                parts.append(text(option))
            } else if let group = groups.first(where: { $0.contains(option.name) }) {
                // An option in two groups (`--watch` with `--json` and with `--health`) is shown once,
                // in the first: `[--json | --watch] [--health]`.
                let unshown = group.filter { !shown.contains($0) }
                parts.append(
                    "[" + unshown.compactMap { self.option(named: $0).map(text) }.joined(separator: " | ") + "]")
                shown.formUnion(group)
            } else {
                parts.append("[\(text(option))]")
            }
        }
        parts += positionals.filter { !$0.required }.map { "[\($0.choices.joined(separator: "|"))]" }
        return parts.joined(separator: " ")
    }

    /// The usage line, what the command does, and one line per option and word.
    package var help: String {
        var rows: [(String, String)] = positionals.map { ($0.choices.joined(separator: "|"), $0.help) }
        rows += options.map { option in
            (
                option.kind.placeholder.map { "\(option.name) \($0)" } ?? option.name,
                option.help + (option.required ? " (required)" : "")
            )
        }
        rows.append(("--help", "this help"))
        var text = usageLine + "\n\n" + details + "\n\n"
        text += Self.table(rows, heading: "options:")
        return text
    }

    /// Rows as two aligned columns under a heading; a long left column gets its text on the next line.
    static func table(_ rows: [(String, String)], heading: String) -> String {
        let width = min(24, rows.map(\.0.count).max() ?? 0)
        var text = heading + "\n"
        for (left, right) in rows {
            if left.count > width {
                text += "  \(left)\n  \(String(repeating: " ", count: width))  \(right)\n"
            } else {
                text += "  \(left)\(String(repeating: " ", count: width - left.count))  \(right)\n"
            }
        }
        return text
    }
}

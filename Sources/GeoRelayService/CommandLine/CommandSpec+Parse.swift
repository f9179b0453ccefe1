import GeoRelayCore

/// Parsing a command's arguments against its description.
extension CommandSpec {
    /// Parses the arguments after the command's name.
    ///
    /// `--name VALUE` and `--name=VALUE` both work; a value that starts with `--` must use
    /// the `=` form (`--device=--odd`), so a forgotten value is reported rather than taking
    /// the next option as it (a negative number such as `--lat -33.9` is a value). `--`
    /// ends the options. An option given twice is an error, not "the last one wins": a
    /// script that says `--destination a ... --destination b` meant something the relay
    /// cannot guess. `--help` or `-h` anywhere asks for help and nothing else is checked.
    package func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments(spec: self)
        let optionsEnd = arguments.firstIndex(of: "--") ?? arguments.endIndex
        if arguments[..<optionsEnd].contains(where: { $0 == "--help" || $0 == "-h" }) {
            parsed.requestHelp()
            return parsed
        }
        var words: [String] = []
        var index = arguments.startIndex
        while index < optionsEnd {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("-"), argument != "-" else {
                words.append(argument)
                continue
            }
            var name = argument
            var inline: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            guard let option = option(named: name) else {
                throw UsageError(command: self.name, "unknown option '\(name)'")
            }
            if parsed.has(name) { throw UsageError(command: self.name, "\(name) given more than once") }
            guard let placeholder = option.kind.placeholder else {
                if inline != nil { throw UsageError(command: self.name, "\(name) takes no value") }
                parsed.set(flag: name)
                continue
            }
            let text: String
            if let inline {
                text = inline
            } else if index < optionsEnd, !arguments[index].hasPrefix("--") {
                text = arguments[index]
                index += 1
            } else {
                throw UsageError(command: self.name, "\(name) needs a value (\(placeholder))")
            }
            parsed.set(name, try value(of: option, text))
        }
        if optionsEnd < arguments.endIndex { words += arguments[(optionsEnd + 1)...] }
        try assign(words, to: &parsed)
        for option in options where option.required && !parsed.has(option.name) {
            throw UsageError(command: name, "\(option.name) \(option.kind.placeholder ?? "") is required")
        }
        for constraint in constraints { try check(constraint, parsed) }
        return parsed
    }

    /// The typed value of one option, or an error naming the option, the text and what was expected.
    private func value(of option: OptionSpec, _ text: String) throws(UsageError) -> ParsedArguments.Value {
        func bad(_ expected: String) -> UsageError {
            UsageError(command: name, "\(option.name) '\(text)' is not \(expected)")
        }
        if text.isEmpty {
            throw UsageError(
                command: name, "\(option.name) needs a value (\(option.kind.placeholder ?? "")), not an empty one")
        }
        switch option.kind {
        case .flag:
            preconditionFailure("a flag has no value")
        case .text:
            return .text(text)
        case .number(_, let range):
            guard let number = Double(text), number.isFinite else { throw bad("a number") }
            if let range, !range.contains(number) {
                throw bad("within \(range.lowerBound.formatted)...\(range.upperBound.formatted)")
            }
            return .number(number)
        case .positiveInteger:
            guard let integer = Int(text), integer > 0 else { throw bad("a positive whole number") }
            return .integer(integer)
        case .time:
            if let ms = Timestamp.milliseconds(fromISO8601: text) { return .time(ms) }
            if let seconds = Double(text), let ms = Timestamp.milliseconds(fromUnix: seconds) { return .time(ms) }
            throw bad("a time (ISO 8601 with a zone, or Unix seconds)")
        case .choice(let words):
            guard words.contains(text) else { throw bad("one of \(words.joined(separator: ", "))") }
            return .text(text)
        }
    }

    /// The words in the order the command declares them; each must be one of its choices.
    private func assign(_ words: [String], to parsed: inout ParsedArguments) throws(UsageError) {
        for (offset, word) in words.enumerated() {
            guard offset < positionals.count else { throw UsageError(command: name, "unexpected argument '\(word)'") }
            let positional = positionals[offset]
            guard positional.choices.contains(word) else {
                throw UsageError(
                    command: name,
                    "'\(word)' is not \(positional.choices.count == 1 ? "'\(positional.choices[0])'" : "one of \(positional.choices.joined(separator: ", "))")"
                )
            }
            parsed.set(positional: positional.name, word)
        }
        for positional in positionals.dropFirst(words.count) where positional.required {
            throw UsageError(command: name, "missing \(positional.choices.joined(separator: "|"))")
        }
    }

    private func check(_ constraint: Constraint, _ parsed: ParsedArguments) throws(UsageError) {
        switch constraint {
        case .atMostOne(let names):
            let given = names.filter(parsed.has)
            if given.count > 1 {
                throw UsageError(command: name, "\(given.joined(separator: " and ")) cannot be combined")
            }
        case .exactlyOne(let names, let what):
            let given = names.filter(parsed.has)
            if given.count != 1 {
                let list = names.dropLast().joined(separator: ", ") + " or " + names[names.count - 1]
                throw UsageError(
                    command: name,
                    given.isEmpty
                        ? "give a \(what): \(list)" : "give one \(what), not \(given.joined(separator: " and "))")
            }
        case .requires(let option, let other):
            if parsed.has(option), !parsed.has(other) {
                throw UsageError(command: name, "\(option) only goes with \(other)")
            }
        }
    }
}

extension Double {
    /// `90` rather than `90.0` in messages.
    fileprivate var formatted: String {
        rounded() == self && abs(self) < 1e15 ? String(Int64(self)) : String(self)
    }
}

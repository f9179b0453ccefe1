import GeoRelayCore

/// A mistake on the command line: one line naming the command and the option, exit status 64.
package struct UsageError: Error, Equatable, CustomStringConvertible {
    /// The command at fault, nil before one was recognised.
    package var command: String?
    package var message: String

    package init(command: String?, _ message: String) {
        self.command = command
        self.message = message
    }

    /// `send: --lat 'north' is not a number (try georelay send --help)`.
    package var description: String {
        guard let command else { return "\(message) (try georelay --help)" }
        return "\(command): \(message) (try georelay \(command) --help)"
    }
}

/// A command's arguments after parsing: every value already of its declared kind.
///
/// The accessors check, as preconditions, that the option is declared with that kind:
/// asking for an undeclared option is a programmer error, not something input can cause.
package struct ParsedArguments: Sendable, Equatable {
    /// An option's value, of the kind its `OptionSpec` declares.
    package enum Value: Sendable, Equatable {
        case text(String)
        case number(Double)
        case integer(Int)
        /// Milliseconds since the epoch.
        case time(Int64)
    }

    /// The command these are the arguments of, for the preconditions' messages.
    package let command: String
    package private(set) var values: [String: Value] = [:]
    package private(set) var flags: Set<String> = []
    package private(set) var positionals: [String: String] = [:]
    /// `--help` or `-h` was given: show the command's help and do nothing else.
    package private(set) var wantsHelp = false

    private let kinds: [String: OptionSpec.Kind]
    private let required: Set<String>
    private let words: Set<String>

    init(spec: CommandSpec) {
        command = spec.name
        kinds = Dictionary(uniqueKeysWithValues: spec.options.map { ($0.name, $0.kind) })
        required = Set(spec.options.filter(\.required).map(\.name) + spec.positionals.filter(\.required).map(\.name))
        words = Set(spec.positionals.map(\.name))
    }

    /// Whether an option or word was given at all.
    package func has(_ name: String) -> Bool {
        values[name] != nil || flags.contains(name) || positionals[name] != nil
    }

    /// Whether a declared flag was given.
    package func flag(_ name: String) -> Bool {
        precondition(kinds[name] == .flag, "\(command): \(name) is not a declared flag")
        return flags.contains(name)
    }

    /// A `.text` or `.choice` option's value.
    package func text(_ name: String) -> String? {
        switch kinds[name] {
        case .text?, .choice?: break
        default: preconditionFailure("\(command): \(name) is not a declared text option")
        }
        guard case .text(let text)? = values[name] else { return nil }
        return text
    }

    /// A `.number` option's value, within its range.
    package func number(_ name: String) -> Double? {
        guard case .number? = kinds[name] else {
            preconditionFailure("\(command): \(name) is not a declared number option")
        }
        guard case .number(let number)? = values[name] else { return nil }
        return number
    }

    /// A `.positiveInteger` option's value.
    package func integer(_ name: String) -> Int? {
        guard case .positiveInteger? = kinds[name] else {
            preconditionFailure("\(command): \(name) is not a declared integer option")
        }
        guard case .integer(let integer)? = values[name] else { return nil }
        return integer
    }

    /// A `.time` option's value in milliseconds since the epoch.
    package func time(_ name: String) -> Int64? {
        precondition(kinds[name] == .time, "\(command): \(name) is not a declared time option")
        guard case .time(let ms)? = values[name] else { return nil }
        return ms
    }

    /// A required option's value (or a required word), which the parser has made sure is there.
    package func requiredText(_ name: String) -> String { required(name, Self.text) }
    package func requiredNumber(_ name: String) -> Double { required(name, Self.number) }
    package func requiredTime(_ name: String) -> Int64 { required(name, Self.time) }
    package func requiredWord(_ name: String) -> String { required(name, Self.positional) }

    private func required<T>(_ name: String, _ accessor: (Self) -> (String) -> T?) -> T {
        precondition(required.contains(name), "\(command): \(name) is not declared required")
        guard let value = accessor(self)(name) else {
            preconditionFailure("\(command): the parser let a required \(name) through")
        }
        return value
    }

    /// The word given for a declared positional, one of its choices.
    package func positional(_ name: String) -> String? {
        precondition(words.contains(name), "\(command): \(name) is not a declared word")
        return positionals[name]
    }

    // The parser's writes.

    mutating func set(_ name: String, _ value: Value) { values[name] = value }
    mutating func set(flag name: String) { flags.insert(name) }
    mutating func set(positional name: String, _ word: String) { positionals[name] = word }
    mutating func requestHelp() { wantsHelp = true }
}

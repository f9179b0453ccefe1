/// gpsd's JSON reports (`gpspipe -w`, or the collector's `gpsd` source): `TPV` for positions and
/// cycles without a fix, `SKY` for the satellites each receiver hears, which the integrity watch
/// judges as it judges NMEA's `GSV` (gpsd's `ss` is the C/N0 in dB-Hz, NMEA's SNR).
extension LineDecoder {
    /// A gpsd TPV report, so that `gpspipe -w` can feed the socket directly.
    func decodeTPV(_ object: JSONObject, defaultDevice: String?) throws(IngestError) -> IngestLine {
        var reader = FieldReader(object: object, prefix: "")
        let mode = try reader.number("mode") ?? 0
        let gpsdDevice = try reader.string("device")
        let device = defaultDevice ?? gpsdDevice
        if mode < 2 { return .gnss(device: device, .noFix) }
        guard let lat = try reader.number("lat"), let lon = try reader.number("lon") else {
            return .gnss(device: device, .noFix)
        }
        let named = try requireDevice(device)
        var position = Position(
            device: named,
            timeMs: try requireTime(try reader.time("time"), device: named),
            lat: lat, lon: lon)
        position.speed = try reader.number("speed")
        position.course = try reader.number("track")
        // Altitude means one thing everywhere: above mean sea level, as NMEA's GGA gives it and
        // a crew expects at sea. gpsd's `altMSL` (`alt` before gpsd 3.20) is that; `altHAE` is
        // above the WGS 84 ellipsoid, tens of metres off, and is converted with `geoidSep` or
        // left out rather than mixed in.
        let altHAE = try reader.number("altHAE")
        let alt = try reader.number("alt")
        let altMSL = try reader.number("altMSL")
        let geoidSeparation = try reader.number("geoidSep")
        position.altitude = altMSL ?? alt ?? altHAE.flatMap { hae in geoidSeparation.map { hae - $0 } }
        let eph = try reader.number("eph")
        let epx = try reader.number("epx")
        position.accuracy = eph ?? epx
        return .position(position)
    }

    /// A gpsd SKY report: each satellite's signal (`ss`, dB-Hz; 0 or absent: not heard) and
    /// whether the fix used it, and the HDOP. Every number is range-checked, a report of more
    /// satellites than any sky holds is refused.
    func decodeSKY(_ object: JSONObject, defaultDevice: String?) throws(IngestError) -> IngestLine {
        var reader = FieldReader(object: object, prefix: "")
        let gpsdDevice = try reader.string("device")
        let device = defaultDevice ?? gpsdDevice
        let hdop = try reader.number("hdop")
        if let hdop, !(0...99.99).contains(hdop) { throw .parse("hdop: \(hdop) is not a dilution of precision") }
        guard let listed = reader.take("satellites"), listed != .null else {
            // A SKY without satellites (gpsd sends them for DOPs alone): nothing to judge.
            return .skip("sky without satellites")
        }
        guard case .array(let satellites) = listed else { throw .parse("satellites: expected an array") }
        guard satellites.count <= Self.maximumSatellites else {
            throw .parse("satellites: \(satellites.count) listed, more than any sky holds (\(Self.maximumSatellites))")
        }
        var cn0: [Double] = []
        var used = 0
        for (index, satellite) in satellites.enumerated() {
            guard case .object(let fields) = satellite else { throw .parse("satellites[\(index)]: expected an object") }
            var one = FieldReader(object: fields, prefix: "satellites[\(index)].")
            if let ss = try one.number("ss") {
                guard (0...99).contains(ss) else {
                    throw .parse("satellites[\(index)].ss: \(ss) is not a C/N0 in dB-Hz")
                }
                if ss > 0 { cn0.append(ss) }
            }
            if try one.bool("used") == true { used += 1 }
        }
        return .gnss(device: device, .sky(GNSSSample.Sky(cn0: cn0, inView: satellites.count, used: used, hdop: hdop)))
    }

    /// More than every constellation's satellites above one horizon (gpsd's own limit is 255).
    static let maximumSatellites = 255
}

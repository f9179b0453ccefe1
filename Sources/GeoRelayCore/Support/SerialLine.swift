import Glibc

/// A serial device's line settings, shared by the receivers the relay reads (`SerialSource`) and
/// the Iridium modem it drives (`SBDPort`): raw mode (no line editing, echo or translation of
/// CR and LF, which binary SBD messages and NMEA alike need left alone) at a speed, with the
/// modem control lines ignored.
package enum SerialLine {
    /// The termios speed for `baud`; nil for a rate the relay does not offer.
    package static func speed(_ baud: Int) -> speed_t? {
        switch baud {
        case 1200: speed_t(B1200)
        case 2400: speed_t(B2400)
        case 4800: speed_t(B4800)
        case 9600: speed_t(B9600)
        case 19200: speed_t(B19200)
        case 38400: speed_t(B38400)
        case 57600: speed_t(B57600)
        case 115200: speed_t(B115200)
        case 230400: speed_t(B230400)
        default: nil
        }
    }

    /// Puts the open device `fd` in raw mode at `speed`. - Returns: whether it took (a pipe or
    /// a file in a test is not a terminal, and is read as it is).
    @discardableResult
    package static func makeRaw(_ fd: Int32, speed: speed_t) -> Bool {
        var settings = termios()
        guard tcgetattr(fd, &settings) == 0 else { return false }
        cfmakeraw(&settings)
        cfsetispeed(&settings, speed)
        cfsetospeed(&settings, speed)
        settings.c_cflag |= tcflag_t(CLOCAL | CREAD)
        return tcsetattr(fd, TCSANOW, &settings) == 0
    }
}

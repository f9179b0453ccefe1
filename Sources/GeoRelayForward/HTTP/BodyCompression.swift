import CZlib
import CZstd
import GeoRelayCore

/// Why a body could not be compressed or decompressed.
package struct CompressionError: Error, Sendable, CustomStringConvertible {
    package let description: String
}

/// Owns one zstd compression context, reused batch after batch (a fresh
/// context per batch would allocate its tables each time).
package final class ZstdCompressor {
    private let context: OpaquePointer

    package init() throws(CompressionError) {
        guard let context = ZSTD_createCCtx() else { throw CompressionError(description: "ZSTD_createCCtx failed") }
        self.context = context
    }

    deinit { ZSTD_freeCCtx(context) }

    package func compress(_ input: [UInt8], level: Int) throws(CompressionError) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: ZSTD_compressBound(input.count))
        let written = output.withUnsafeMutableBytes { out in
            input.withUnsafeBytes { source in
                ZSTD_compressCCtx(context, out.baseAddress, out.count, source.baseAddress, source.count, Int32(level))
            }
        }
        try Zstd.check(written)
        output.removeSubrange(written...)
        return output
    }
}

@available(*, unavailable)
extension ZstdCompressor: Sendable {}

/// zstd's status codes, in one place.
package enum Zstd {
    static func check(_ result: Int) throws(CompressionError) {
        if ZSTD_isError(result) != 0 {
            throw CompressionError(description: "zstd: \(String(cString: ZSTD_getErrorName(result)))")
        }
    }

    /// Decompresses one frame (the tests' fake server uses this).
    package static func decompress(_ input: [UInt8], limit: Int = 64 << 20) throws(CompressionError) -> [UInt8] {
        let size = input.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
        guard size != ZSTD_CONTENTSIZE_ERROR, size != ZSTD_CONTENTSIZE_UNKNOWN, size <= UInt64(limit) else {
            throw CompressionError(description: "zstd: not a frame with a known size")
        }
        var output = [UInt8](repeating: 0, count: Int(size))
        let written = output.withUnsafeMutableBytes { out in
            input.withUnsafeBytes { ZSTD_decompress(out.baseAddress, out.count, $0.baseAddress, $0.count) }
        }
        try check(written)
        return Array(output[0..<written])
    }
}

/// gzip through zlib, with zlib's status codes turned into errors in one place.
package enum Gzip {
    private static func check(_ code: Int32, _ what: String) throws(CompressionError) {
        guard code == Z_OK || code == Z_STREAM_END else {
            throw CompressionError(description: "zlib \(what): error \(code)")
        }
    }

    package static func compress(_ input: [UInt8], level: Int32 = 6) throws(CompressionError) -> [UInt8] {
        var stream = z_stream()
        try check(georelay_deflate_init_gzip(&stream, level), "deflateInit2")
        defer { deflateEnd(&stream) }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(input.count))) + 32)
        var source = input
        let code = source.withUnsafeMutableBytes { src in
            output.withUnsafeMutableBytes { out in
                stream.next_in = src.baseAddress?.assumingMemoryBound(to: Bytef.self)
                stream.avail_in = uInt(src.count)
                stream.next_out = out.baseAddress?.assumingMemoryBound(to: Bytef.self)
                stream.avail_out = uInt(out.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        guard code == Z_STREAM_END else { throw CompressionError(description: "zlib deflate: error \(code)") }
        output.removeSubrange(Int(stream.total_out)...)
        return output
    }

    package static func decompress(_ input: [UInt8], limit: Int = 64 << 20) throws(CompressionError) -> [UInt8] {
        var stream = z_stream()
        try check(georelay_inflate_init_gzip(&stream), "inflateInit2")
        defer { inflateEnd(&stream) }
        var source = input
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var code: Int32 = Z_OK
        var tooLarge = false
        source.withUnsafeMutableBytes { src in
            stream.next_in = src.baseAddress?.assumingMemoryBound(to: Bytef.self)
            stream.avail_in = uInt(src.count)
            repeat {
                let produced = chunk.withUnsafeMutableBytes { out -> Int in
                    stream.next_out = out.baseAddress?.assumingMemoryBound(to: Bytef.self)
                    stream.avail_out = uInt(out.count)
                    code = inflate(&stream, Z_NO_FLUSH)
                    return out.count - Int(stream.avail_out)
                }
                if code != Z_OK && code != Z_STREAM_END { return }
                output.append(contentsOf: chunk[0..<produced])
                if output.count > limit {
                    tooLarge = true
                    return
                }
            } while code != Z_STREAM_END && (stream.avail_in > 0 || stream.avail_out == 0)
        }
        if tooLarge { throw CompressionError(description: "gzip: body larger than \(limit) bytes") }
        try check(code, "inflate")
        guard code == Z_STREAM_END else { throw CompressionError(description: "gzip: truncated stream") }
        return output
    }
}

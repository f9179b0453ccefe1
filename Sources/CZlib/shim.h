#ifndef GEORELAY_CZLIB_SHIM_H
#define GEORELAY_CZLIB_SHIM_H
#include <zlib.h>

// deflateInit2 and inflateInit2 are macros, which Swift cannot call.
// windowBits 15 + 16 selects the gzip wrapper (Content-Encoding: gzip).
static inline int georelay_deflate_init_gzip(z_streamp stream, int level) {
    return deflateInit2(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}
static inline int georelay_inflate_init_gzip(z_streamp stream) {
    return inflateInit2(stream, 15 + 16);
}
#endif

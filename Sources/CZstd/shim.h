#ifndef GEORELAY_CZSTD_SHIM_H
#define GEORELAY_CZSTD_SHIM_H
#include <zstd.h>
#endif

#ifndef GEORELAY_CSQLITE_SHIM_H
#define GEORELAY_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift cannot import.
static inline int georelay_sqlite3_bind_text_transient(sqlite3_stmt *stmt, int index, const char *text, int bytes) {
    return sqlite3_bind_text(stmt, index, text, bytes, SQLITE_TRANSIENT);
}
#endif

/* libFuzzer target: the backup manifest decoder of index/backup.c
 * (DIR/MANIFEST is read from a directory an operator hands to ternd
 * --restore-from, so its bytes are untrusted). A decoded manifest must
 * name only files inside the backup and re-encode to the same bytes
 * (checksum field excepted: fuzz builds define
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION and skip checksum checks). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idx_int.h"

/* libFuzzer's entry point, named by libFuzzer.
 * NOLINTNEXTLINE(readability-identifier-naming) */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct idx__backup_manifest m;
    struct tern_wbuf w;
    int rc = idx__backup_manifest_decode(data, size, &m);
    if (rc != 0) {
        if (rc != TERN_EMALFORMED && rc != TERN_ECORRUPT &&
            rc != TERN_EVERSION && rc != -ENOMEM) {
            abort();
        }
        return 0;
    }
    for (uint32_t i = 0; i < m.n_files; i++) {
        if (!idx__backup_name_valid(m.files[i].name, strlen(m.files[i].name)) ||
            strstr(m.files[i].name, "..") != NULL) {
            abort();
        }
    }
    tern_wbuf_init(&w);
    if (idx__backup_manifest_encode(&m, &w) != 0 || w.len != size ||
        memcmp(w.base, data, size - 4) != 0) {
        abort();
    }
    tern_wbuf_free(&w);
    idx__backup_manifest_free(&m);
    return 0;
}

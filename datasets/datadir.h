/* Where benchmark data lives: --data-dir, else $CKV_DATA_DIR, else
 * ../shared/data when it exists. Every command that reads data uses this. */
#ifndef CKV_DATADIR_H
#define CKV_DATADIR_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* option: the --data-dir value or NULL. Writes the chosen directory to out;
 * fails naming where it looked when none is a directory. */
ckv_status ckv_data_dir(const char *option, char *out, size_t cap, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* Where benchmark data lives: --data-dir, else $CKV_DATA_DIR, else
 * ../shared/data when it exists. */
#ifndef CKV_DATADIR_H
#define CKV_DATADIR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Returns explicit_dir when non-NULL, else $CKV_DATA_DIR when set and
 * non-empty, else "../shared/data" when it is a directory, else NULL. The
 * result is not owned by the caller. */
const char *ckv_data_dir(const char *explicit_dir);

#ifdef __cplusplus
}
#endif
#endif

#include "datadir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static ckv_status choose(const char *dir, const char *source, char *out, size_t cap,
                         ckv_error *err)
{
    if (!is_dir(dir))
        return ckv_errorf(err, CKV_ERR_IO, "data directory '%s' (from %s) is not a directory", dir,
                          source);
    if ((size_t)snprintf(out, cap, "%s", dir) >= cap)
        return ckv_errorf(err, CKV_ERR_ARG, "data directory path '%s' is too long", dir);
    return CKV_OK;
}

ckv_status ckv_data_dir(const char *option, char *out, size_t cap, ckv_error *err)
{
    if (option)
        return choose(option, "--data-dir", out, cap, err);
    const char *env = getenv("CKV_DATA_DIR");
    if (env && *env)
        return choose(env, "$CKV_DATA_DIR", out, cap, err);
    if (is_dir("../shared/data"))
        return choose("../shared/data", "the default", out, cap, err);
    return ckv_errorf(err, CKV_ERR_IO,
                      "no data directory: pass --data-dir DIR or set CKV_DATA_DIR "
                      "(../shared/data does not exist)");
}

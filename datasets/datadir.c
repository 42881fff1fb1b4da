#include "datadir.h"

#include <stdlib.h>
#include <sys/stat.h>

const char *ckv_data_dir(const char *explicit_dir)
{
    if (explicit_dir)
        return explicit_dir;
    const char *env = getenv("CKV_DATA_DIR");
    if (env && *env)
        return env;
    struct stat sb;
    if (stat("../shared/data", &sb) == 0 && S_ISDIR(sb.st_mode))
        return "../shared/data";
    return NULL;
}

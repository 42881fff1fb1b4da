/* Test helper: the default model's path ($CKV_MODEL, else
 * $CKV_SOURCE_ROOT/models/...). scripts/test fetches it, so a missing file
 * is a failure, not a skip. */
#ifndef CKV_TESTS_MODEL_PATH_H
#define CKV_TESTS_MODEL_PATH_H

#include <stdio.h>
#include <stdlib.h>

static inline const char *test_model_path(void)
{
    static char buf[4096];
    const char *m = getenv("CKV_MODEL");
    if (m && *m)
        return m;
    const char *root = getenv("CKV_SOURCE_ROOT");
    snprintf(buf, sizeof buf, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root ? root : ".");
    return buf;
}

static inline const char *test_source_path(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("CKV_SOURCE_ROOT");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}

#endif

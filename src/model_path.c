/* Model path resolution shared by every command that loads a model. */
#include <stdlib.h>

#include "model.h"

const char *ckv_default_model_path(const char *explicit_path)
{
    if (explicit_path && *explicit_path)
        return explicit_path;
    const char *env = getenv("CKV_MODEL");
    if (env && *env)
        return env;
    return "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

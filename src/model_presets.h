/* The configurations of a few published models, by name, for benchmarks
 * that need a model's shapes but not its weights (`ckv bench`). */
#ifndef CKV_MODEL_PRESETS_H
#define CKV_MODEL_PRESETS_H

#include "model.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL-terminated list of the names ckv_model_preset knows. */
const char *const *ckv_model_preset_names(void);
/* The configuration of `name` (CKV_ERR_ARG naming the known ones when unknown). */
ckv_status ckv_model_preset(const char *name, ckv_config *c, ckv_error *err);
/* Parameters of the decoder's matrices per token: every layer's projections
 * and FFN plus the output matrix (the embedding is a gather, not read whole). */
uint64_t ckv_config_matrix_params(const ckv_config *c);

#ifdef __cplusplus
}
#endif
#endif

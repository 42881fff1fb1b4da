/* The C boundary of the CUDA backend: everything in kernels/ is reached
 * through functions declared here with C linkage. Built only when the `cuda`
 * option finds nvcc and cuBLAS (CKV_HAVE_CUDA). */
#ifndef CKV_KERNELS_CUDA_H
#define CKV_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t index;
    char name[256];
    int32_t cc_major, cc_minor;
    int32_t sm_count;
    size_t mem_total;
    size_t mem_free;
} ckv_cuda_device;

/* Number of usable GPUs; CKV_ERR_DEVICE (with the CUDA message) when there
 * is no driver or no device. */
ckv_status ckv_cuda_device_count(int32_t *count, ckv_error *err);
ckv_status ckv_cuda_device_query(int32_t index, ckv_cuda_device *out, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif

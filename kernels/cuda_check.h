// Checked CUDA and cuBLAS calls for the .cu files: on failure the enclosing
// function returns a ckv_status with the call, its place and CUDA's message
// in `err` (which must be in scope).
#ifndef CKV_KERNELS_CUDA_CHECK_H
#define CKV_KERNELS_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "status.h"

#define CKV_CUDA(call)                                                                       \
    do {                                                                                     \
        cudaError_t ckv_e_ = (call);                                                         \
        if (ckv_e_ != cudaSuccess)                                                           \
            return ckv_errorf(err, CKV_ERR_DEVICE, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, \
                              #call, cudaGetErrorString(ckv_e_), cudaGetErrorName(ckv_e_));  \
    } while (0)

// After a kernel launch: reports bad launch configurations at once.
#define CKV_CUDA_LAUNCHED() CKV_CUDA(cudaGetLastError())

#define CKV_CUBLAS(call)                                                                     \
    do {                                                                                     \
        cublasStatus_t ckv_s_ = (call);                                                      \
        if (ckv_s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return ckv_errorf(err, CKV_ERR_DEVICE, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, \
                              #call, cublasGetStatusString(ckv_s_), cublasGetStatusName(ckv_s_)); \
    } while (0)

#endif

// The host side of cuda_tma.cuh: tensor maps, encoded by the driver's
// cuTensorMapEncodeTiled, reached through the runtime so that the build
// links no libcuda.
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "cuda_tma.cuh"

static PFN_cuTensorMapEncodeTiled_v12000 encoder(void)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                               cudaEnableDefault, &q);
        return e == cudaSuccess && q == cudaDriverEntryPointSuccess
                   ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p)
                   : NULL;
    }();
    return fn;
}

ckv_status ckv_tma_map_rows(CUtensorMap *map, const void *base, int32_t heads, int32_t capacity,
                            int32_t head_dim, int32_t rows, ckv_error *err)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
    if (!encode)
        return ckv_errorf(err, CKV_ERR_DEVICE, "the driver has no cuTensorMapEncodeTiled");
    const cuuint64_t dim[3] = {(cuuint64_t)head_dim, (cuuint64_t)capacity, (cuuint64_t)heads};
    const cuuint64_t stride[2] = {(cuuint64_t)head_dim * 2, (cuuint64_t)capacity * head_dim * 2};
    const cuuint32_t box[3] = {64, (cuuint32_t)rows, 1}, step[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(base),
                              dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return ckv_errorf(err, CKV_ERR_DEVICE,
                          "cuTensorMapEncodeTiled: error %d for a map of %d x %d x %d bf16 rows",
                          (int)r, heads, capacity, head_dim);
    return CKV_OK;
}

#include <stdio.h>
#include <string.h>

#include "ckv_config.h"
#include "commands.h"
#include "opts.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

int cmd_devices(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ckv devices\n\nLists CUDA devices with compute capability, memory and peak memory bandwidth.\n"
                   "Exits 1 with the CUDA error when there is no usable GPU, and 77 when\n"
                   "ckv was built without CUDA.\n");
            return CLI_OK;
        }
        return cli_usage_error("devices", "unexpected argument '%s'", argv[i]);
    }
#if CKV_HAVE_CUDA
    ckv_error err = {0};
    int32_t n = 0;
    if (ckv_cuda_device_count(&n, &err))
        return cli_fail("devices", &err);
    for (int32_t i = 0; i < n; i++) {
        ckv_cuda_device d;
        if (ckv_cuda_device_query(i, &d, &err))
            return cli_fail("devices", &err);
        printf("%d: %s, compute %d.%d, %d SMs, %.1f GiB total, %.1f GiB free, %.2f TB/s peak\n",
               d.index, d.name, d.cc_major, d.cc_minor, d.sm_count, (double)d.mem_total / (1 << 30),
               (double)d.mem_free / (1 << 30), d.peak_bw / 1e12);
    }
    return CLI_OK;
#else
    fprintf(stderr, "ckv devices: built without CUDA (configure with -Dcuda=enabled)\n");
    return 77;
#endif
}

/* libFuzzer target: arbitrary bytes as a sweep config file. The loader
 * takes a path, so each input goes through a temp file; whatever it
 * returns, ckv_sweep_config_free must release everything (the leak checker
 * runs at exit). Any crash, sanitizer report or leak is a bug. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char tmp_path[64];

static void remove_tmp(void)
{
    unlink(tmp_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tmp_path[0]) {
        snprintf(tmp_path, sizeof tmp_path, "/tmp/fuzz_config_%d.yaml", (int)getpid());
        atexit(remove_tmp);
    }
    FILE *fp = fopen(tmp_path, "wb");
    if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp))
        abort(); /* the harness failed, not the reader */
    ckv_sweep_config c;
    ckv_error e = {0};
    if (ckv_sweep_config_load(&c, tmp_path, &e) && !e.msg[0])
        abort(); /* every error carries a message */
    ckv_sweep_config_free(&c);
    return 0;
}

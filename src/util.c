#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double ckv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ckv_status ckv_read_file(const char *path, char **out, size_t *len, ckv_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (n < cap) {
            if (ferror(fp)) {
                int e = errno;
                free(buf);
                fclose(fp);
                return ckv_errorf(err, CKV_ERR_IO, "%s: read failed: %s", path, strerror(e));
            }
            break;
        }
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) {
            free(buf);
            fclose(fp);
            return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
        }
        buf = nb;
        cap *= 2;
    }
    fclose(fp);
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return CKV_OK;
}

ckv_status ckv_write_file_atomic(const char *path, const void *data, size_t len, ckv_error *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp)
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, plen + 16, "%s.tmp%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        ckv_errorf(err, CKV_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return CKV_ERR_IO;
    }
    bool ok = fwrite(data, 1, len, fp) == len;
    ok = (fflush(fp) == 0) && ok;
    ok = (fclose(fp) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        ckv_errorf(err, CKV_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return CKV_ERR_IO;
    }
    free(tmp);
    return CKV_OK;
}

char *ckv_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

int ckv_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

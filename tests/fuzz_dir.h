/* Test helper: the inputs of a fuzz target's corpus or regressions folder
 * (tests/fuzz/), for the readers' tests that replay them. Every regular
 * file but README.md and dot files (subfolders hold other targets' inputs)
 * goes to fn with its path and name; returns how many did, and fails the
 * test where the folder cannot be read. */
#ifndef CKV_TESTS_FUZZ_DIR_H
#define CKV_TESTS_FUZZ_DIR_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static inline int fuzz_dir_each(const char *dir,
                                void (*fn)(const char *path, const char *name, void *ctx),
                                void *ctx)
{
    DIR *d = opendir(dir);
    cr_assert(d, "cannot open %s", dir);
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "README.md"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat sb;
        cr_assert_eq(stat(path, &sb), 0, "%s", path);
        if (S_ISDIR(sb.st_mode))
            continue;
        fn(path, de->d_name, ctx);
        files++;
    }
    closedir(d);
    return files;
}

#endif

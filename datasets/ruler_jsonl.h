/* RULER's official jsonl data format (scripts/data/manifest_utils.py):
 * one object per line with index, input, outputs, length,
 * length_w_model_temp, answer_prefix, ASCII-escaped like Python's
 * json.dump. We add "task" and "max_seq_length" so that several tasks and
 * lengths can share one file; readers of the official format ignore them. */
#ifndef CKV_RULER_JSONL_H
#define CKV_RULER_JSONL_H

#include <stdio.h>

#include "ruler.h"
#include "status.h"

/* Writes every sample of set to fp (path names the file in errors). */
ckv_status ckv_ruler_write_jsonl(FILE *fp, const char *path, const ckv_ruler_set *set,
                                 ckv_error *err);

#endif

/* LongBench's middle truncation (pred.py): a prompt longer than max_length
 * tokens becomes decode(first half) + decode(last half), half =
 * int(max_length / 2), each half decoded as Hugging Face does with
 * skip_special_tokens=True. */
#ifndef CKV_TRUNCATE_H
#define CKV_TRUNCATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sample.h"
#include "status.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Truncates text (len bytes) to *out (malloc'd, NUL-terminated); a text of
 * at most max_length tokens (BOS counted when the model adds one) is copied
 * unchanged and *truncated is false. Each decoded half is made valid UTF-8
 * as Hugging Face's lossy decoding does: every maximal ill-formed
 * subsequence (a character cut at the boundary) becomes U+FFFD. */
ckv_status ckv_truncate_middle(const ckv_tokenizer *t, const char *text, size_t len,
                               int32_t max_length, char **out, size_t *out_len, bool *truncated,
                               ckv_error *err);

/* Truncates a sample's prompt in place. The question part is kept as the
 * split when the truncated prompt still ends with it; otherwise (a question
 * longer than half the budget) the whole prompt becomes the question part. */
ckv_status ckv_sample_truncate(const ckv_tokenizer *t, ckv_sample *s, int32_t max_length,
                               bool *truncated, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif

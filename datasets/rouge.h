/* ROUGE-L as the `rouge` package (pltrdy, 1.0.1) computes it with its
 * defaults: sentences are the non-empty pieces of text.split("."), each
 * whitespace-normalised (a blank piece becomes the empty sentence, whose only
 * word is ""); words are unique (exclusive=True); the LCS of each (reference
 * sentence, hypothesis sentence) pair is backtracked as its _recon_lcs does
 * and the union of LCS words over all pairs is a set. Its backtrack is
 * recursive: when a pair needs more Python frames than remain under the
 * recursion limit, the package raises and LongBench scores 0. */
#ifndef CKV_ROUGE_H
#define CKV_ROUGE_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Python frames available to _recon under CPython's default recursion limit
 * (1000) when LongBench's eval.py calls rouge_score: module, scorer,
 * rouge_score, get_scores, _get_avg_scores, lambda, rouge_l_summary_level,
 * _union_lcs, _recon_lcs use 9. rouge_zh_score adds one frame. Measured with
 * rouge 1.0.1 under CPython 3.11 (identical sentences of 990 words score 1,
 * of 991 words 0). */
enum { CKV_ROUGE_MAX_RECON_FRAMES = 991 };

/* Rouge().get_scores([pred], [truth], avg=True)["rouge-l"]["f"], with 0
 * where the package raises (empty side, recursion beyond max_frames). */
ckv_status ckv_rouge_l(const char *pred, const char *truth, size_t max_frames, double *score,
                       ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif

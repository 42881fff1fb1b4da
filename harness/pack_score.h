/* Scores a prediction for one task-pack sample with the sample's metric,
 * applying the benchmark's rules as the pack records them (LongBench's
 * first-line cut for trec, triviaqa, samsum and lsht). */
#ifndef CKV_PACK_SCORE_H
#define CKV_PACK_SCORE_H

#include "pack.h"
#include "status.h"

ckv_status ckv_pack_score(const ckv_pack_sample *s, const char *prediction, double *score,
                          ckv_error *err);

#endif

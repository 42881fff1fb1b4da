#include "ruler_jsonl.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static ckv_status sample_json(const ckv_ruler_set *set, const ckv_ruler_sample *s, json_t **out,
                              ckv_error *err)
{
    json_t *o = json_object(), *outs = json_array();
    int bad = !o || !outs;
    for (uint32_t i = 0; !bad && i < s->n_outputs; i++)
        bad = json_array_append_new(outs, json_string(s->outputs[i]));
    bad = bad || json_object_set_new(o, "index", json_integer(s->index)) ||
          json_object_set_new(o, "input", json_string(s->input)) ||
          json_object_set(o, "outputs", outs) ||
          json_object_set_new(o, "length", json_integer(s->length)) ||
          json_object_set_new(o, "length_w_model_temp", json_integer(s->length)) ||
          json_object_set_new(o, "answer_prefix", json_string(s->answer_prefix)) ||
          json_object_set_new(o, "task", json_string(set->task)) ||
          json_object_set_new(o, "max_seq_length", json_integer(set->target_length));
    json_decref(outs);
    if (bad) {
        json_decref(o);
        /* json_string() refuses invalid UTF-8; everything else is memory */
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s sample %u: cannot encode as JSON (invalid "
                          "UTF-8 or out of memory)", set->task, s->index);
    }
    *out = o;
    return CKV_OK;
}

/* Python writes \u escapes with lower-case hex, jansson with upper case:
 * match Python so files are byte-identical in form. */
static void lower_unicode_escapes(char *s)
{
    for (; *s; s++) {
        if (*s != '\\')
            continue;
        if (s[1] == 'u') {
            for (int i = 2; i < 6 && s[i]; i++)
                s[i] = (char)tolower((unsigned char)s[i]);
        }
        if (s[1])
            s++; /* skip the escaped character, e.g. the second \ of \\ */
    }
}

ckv_status ckv_ruler_write_jsonl(FILE *fp, const char *path, const ckv_ruler_set *set,
                                 ckv_error *err)
{
    for (size_t i = 0; i < set->n_samples; i++) {
        json_t *o = NULL;
        ckv_status st = sample_json(set, &set->samples[i], &o, err);
        if (st)
            return st;
        char *line = json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        json_decref(o);
        if (!line)
            return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory encoding %s sample %zu",
                              path, set->task, i);
        lower_unicode_escapes(line);
        int bad = fputs(line, fp) == EOF || fputc('\n', fp) == EOF;
        free(line);
        if (bad)
            return ckv_errorf(err, CKV_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return CKV_OK;
}

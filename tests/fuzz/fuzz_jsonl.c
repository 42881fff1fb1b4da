/* libFuzzer target: arbitrary bytes as a jsonl file, read through both
 * importers built on the jsonl reader (LongBench and RULER) with small
 * fixed task configurations. Every error must carry a message; every
 * sample must hold together (context part inside the prompt, prompt
 * NUL-terminated). Any crash, sanitizer report or leak is a bug. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "longbench.h"
#include "ruler_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Hand-written stand-ins for DATA_DIR's official files: a few datasets and
 * every RULER task type, templates using each record field. */
static const char lb_prompts[] =
    "{\"qasper\": \"Article: {context}\\n\\nQuestion: {input}\\n\\nAnswer:\","
    " \"trec\": \"{{label}} {context}\\n{input}\","
    " \"passage_count\": \"{context}{language}{_id}{dataset}\","
    " \"lcc\": \"{context}\"}";
static const char lb_maxlen[] = "{\"qasper\": 128, \"trec\": 64, \"passage_count\": 32, \"lcc\": 64}";
static const char ruler_templates[] =
    "{\"tasks\": {\"niah_single_1\": {\"task\": \"niah\"}, \"vt\": {\"task\": \"variable_tracking\"},"
    " \"cwe\": {\"task\": \"common_words_extraction\"}, \"fwe\": {\"task\": \"freq_words_extraction\"},"
    " \"qa_1\": {\"task\": \"qa\"}},"
    " \"task_types\": {\"niah\": {\"tokens_to_generate\": 128}, \"variable_tracking\":"
    " {\"tokens_to_generate\": 30}, \"common_words_extraction\": {\"tokens_to_generate\": 120},"
    " \"freq_words_extraction\": {\"tokens_to_generate\": 50}, \"qa\": {\"tokens_to_generate\": 32}},"
    " \"metric_by_task_type\": {\"niah\": \"string_match_all\", \"variable_tracking\":"
    " \"string_match_all\", \"common_words_extraction\": \"string_match_all\","
    " \"freq_words_extraction\": \"string_match_all\", \"qa\": \"string_match_part\"}}";
static const char *const ruler_tasks[] = {"niah_single_1", "vt", "cwe", "fwe", "qa_1"};

static ckv_longbench_config lb;
static ckv_ruler_config ruler;
static char tmp_path[64];

static void cleanup(void)
{
    unlink(tmp_path);
    ckv_longbench_config_free(&lb);
    ckv_ruler_config_free(&ruler);
}

static void setup(void)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/fuzz_jsonl_%d.jsonl", (int)getpid());
    snprintf(lb.dir, sizeof lb.dir, "fuzz");
    snprintf(ruler.path, sizeof ruler.path, "fuzz/ruler/templates.json");
    lb.prompts = json_loads(lb_prompts, 0, NULL);
    lb.maxlen = json_loads(lb_maxlen, 0, NULL);
    ruler.templates = json_loads(ruler_templates, 0, NULL);
    if (!lb.prompts || !lb.maxlen || !ruler.templates)
        abort();
    atexit(cleanup);
}

static void check(ckv_status st, const ckv_error *e, ckv_sample *s, size_t n)
{
    if (st) {
        if (!e->msg[0] || s || n)
            abort();
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (s[i].context_len > s[i].prompt_len || s[i].prompt[s[i].prompt_len] || !s[i].task ||
            !s[i].id || s[i].max_new_tokens <= 0)
            abort();
    ckv_samples_free(s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tmp_path[0])
        setup();
    FILE *fp = fopen(tmp_path, "wb");
    if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp))
        abort(); /* the harness failed, not the reader */
    ckv_sample *s = NULL;
    size_t n = 0;
    ckv_error e = {0};
    /* dataset NULL: the record's own `dataset` field picks the template. */
    check(ckv_longbench_load(&lb, tmp_path, NULL, 0, &s, &n, &e), &e, s, n);
    s = NULL, n = 0, e.msg[0] = 0;
    /* The size picks the task, so every task type's regex sees inputs. */
    const char *task = ruler_tasks[size % (sizeof ruler_tasks / sizeof ruler_tasks[0])];
    check(ckv_ruler_load(&ruler, tmp_path, task, 0, &s, &n, &e), &e, s, n);
    return 0;
}

/* RULER generator: official template text (copied by hand from RULER's
 * constants.py via templates.json / benchmarks.md), needle placement,
 * answers in the context, CWE/FWE frequencies by counting, length
 * fitting, determinism, missing data, and the RNG against published
 * vectors. Data: $CKV_DATA_DIR, else ../shared/data beside the source tree;
 * tests whose data or model is absent are skipped with the reason. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datadir.h"
#include "gguf.h"
#include "rng.h"
#include "splitmix.h"
#include "ruler.h"
#include "ruler_text.h"
#include "token_count.h"
#include "tokenizer.h"

/* Words separated by spaces or newlines: a stand-in tokenizer whose
 * counts are easy to derive by hand. */
static ckv_status count_words(void *ctx, const char *t, size_t n, size_t *out, ckv_error *err)
{
    (void)ctx;
    (void)err;
    size_t c = 0;
    bool in = false;
    for (size_t i = 0; i < n; i++) {
        bool sp = t[i] == ' ' || t[i] == '\n';
        c += !sp && !in;
        in = !sp;
    }
    *out = c;
    return CKV_OK;
}

static const ckv_token_counter words_counter = {count_words, NULL};

static const char *data_dir(void)
{
    const char *d = ckv_data_dir(NULL);
    if (!d) {
        /* the test runs from the build dir: try the source tree's sibling */
        static char buf[2048];
        snprintf(buf, sizeof buf, "%s/../shared/data", CKV_SOURCE_ROOT);
        d = buf;
    }
    return d;
}

static bool have(const char *rel)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", data_dir(), rel);
    return access(p, R_OK) == 0;
}

static void skip_without(const char *rel)
{
    if (!have(rel))
        cr_skip_test("data file %s absent under %s", rel, data_dir());
}

static ckv_ruler_set gen(const char *task, uint32_t len, uint32_t n, uint64_t seed)
{
    skip_without("ruler/templates.json");
    ckv_ruler *r;
    ckv_error e = {0};
    cr_assert_eq(ckv_ruler_open(&r, data_dir(), &e), CKV_OK, "%s", e.msg);
    ckv_ruler_set s;
    cr_assert_eq(ckv_ruler_generate(r, task, len, n, seed, &words_counter, &s, &e), CKV_OK, "%s",
                 e.msg);
    ckv_ruler_close(r);
    return s;
}

static bool starts_with(const char *s, const char *p)
{
    return !strncmp(s, p, strlen(p));
}

static bool ends_with(const char *s, const char *p)
{
    size_t a = strlen(s), b = strlen(p);
    return a >= b && !strcmp(s + a - b, p);
}

static size_t count_sub(const char *h, const char *n)
{
    size_t c = 0;
    for (const char *p = h; (p = strstr(p, n)); p++)
        c++;
    return c;
}

/* The key K of a needle "One of the special magic T for K is: V." */
static void needle_key(const char *needle, char *key, size_t cap)
{
    const char *a = strstr(needle, " for ") + 5, *b = strstr(a, " is: ");
    snprintf(key, cap, "%.*s", (int)(b - a), a);
}

Test(ruler_rng, published_vectors)
{
    /* SplitMix64 from state 0 (Vigna's reference): e220a8397b1dcdaf */
    uint64_t st = 0;
    cr_assert_eq(ckv_splitmix64(&st), 0xe220a8397b1dcdafULL);
    cr_assert_eq(ckv_splitmix64(&st), 0x6e789e6aa1b965f4ULL);
    /* xoshiro256** from state {1, 2, 3, 4}: rotl(2 * 5, 7) * 9 = 11520, then 0 */
    ckv_rng r = {{1, 2, 3, 4}};
    cr_assert_eq(ckv_rng_next(&r), 11520u);
    cr_assert_eq(ckv_rng_next(&r), 0u);
    cr_assert_eq(ckv_rng_next(&r), 1509978240u);
    cr_assert_eq(ckv_rng_next(&r), 1215971899390074240ULL);
}

Test(ruler_rng, bounded_and_sample_distinct)
{
    ckv_rng r;
    ckv_rng_seed(&r, 7);
    int hist[3] = {0};
    for (int i = 0; i < 3000; i++) {
        int64_t v = ckv_rng_range(&r, 10000, 10002);
        cr_assert(v >= 10000 && v <= 10002);
        hist[v - 10000]++;
    }
    for (int i = 0; i < 3; i++) /* each ~1000; 6 sigma is ~160 */
        cr_assert(hist[i] > 800 && hist[i] < 1200, "bucket %d: %d", i, hist[i]);
    size_t scratch[40], out[40];
    ckv_rng_sample(&r, 40, 40, scratch, out);
    bool seen[40] = {0};
    for (int i = 0; i < 40; i++) {
        cr_assert(out[i] < 40 && !seen[out[i]]);
        seen[out[i]] = true;
    }
}

Test(ruler_text, python_semantics)
{
    /* "are" inside "square" is replaced too, as Python's str.replace does */
    char *s = ruler_replace_all("Some are square", "are", "is");
    cr_assert_str_eq(s, "Some is squis");
    free(s);
    size_t n;
    /* U+00A0 and newlines count as \s for Python 3 str regexes */
    const char in[] = "a \xc2\xa0\n b\tc";
    char *c = ruler_collapse_space(in, sizeof in - 1, &n);
    cr_assert_str_eq(c, "a b c");
    free(c);
    const char txt[] = "Mr. Smith went to Washington. He met Dr. Jones at 3 p.m. today. "
                       "Why? \"Because.\" The end.";
    size_t *st;
    size_t k = ruler_sentences(txt, sizeof txt - 1, &st);
    cr_assert_eq(k, 5);
    cr_assert(starts_with(txt + st[1], "He met Dr. Jones"));
    cr_assert(starts_with(txt + st[2], "Why?"));
    cr_assert(starts_with(txt + st[3], "\"Because.\""));
    cr_assert(starts_with(txt + st[4], "The end."));
    free(st);
}

Test(ruler_template, niah_single_noise)
{
    skip_without("ruler/wonderwords/nounlist.txt");
    ckv_ruler_set s = gen("niah_single_1", 4096, 3, 42);
    cr_assert_str_eq(s.metric, "string_match_all");
    cr_assert_eq(s.max_new_tokens, 128);
    for (size_t i = 0; i < s.n_samples; i++) {
        const ckv_ruler_sample *x = &s.samples[i];
        cr_assert(starts_with(x->input, "A special magic number is hidden within the following "
                                        "text. Make sure to memorize it. I will quiz you about "
                                        "the number afterwards.\nThe grass is green. The sky is "
                                        "blue. The sun is yellow. Here we go. There and back "
                                        "again.\n"));
        cr_assert_eq(x->n_needles, 1);
        char key[128], q[512], p[512];
        needle_key(x->input + x->needle_offset[0], key, sizeof key);
        snprintf(q, sizeof q, "again.\nWhat is the special magic number for %s mentioned in "
                              "the provided text?", key);
        snprintf(p, sizeof p, " The special magic number for %s mentioned in the provided text is",
                 key);
        cr_assert(ends_with(x->input, q), "%s", x->input + strlen(x->input) - 200);
        cr_assert_str_eq(x->answer_prefix, p);
        /* the query-agnostic split puts the question after the haystack */
        cr_assert(starts_with(x->input + x->context_end, "\nWhat is the special magic number"));
    }
    ckv_ruler_set_free(&s);
}

/* Each needle once, at its recorded offset and depth; answers in context. */
static void check_needles(const ckv_ruler_set *s, double depth_tol)
{
    for (size_t i = 0; i < s->n_samples; i++) {
        const ckv_ruler_sample *x = &s->samples[i];
        size_t clen = x->context_end - x->context_start;
        char *ctx = strndup(x->input + x->context_start, clen);
        for (uint32_t j = 0; j < x->n_needles; j++) {
            const char *nd = x->input + x->needle_offset[j];
            const char *dot = strstr(nd, ".");
            /* the needle sentence ends at its value's period */
            char *needle = strndup(nd, (size_t)(dot - nd) + 1);
            cr_assert(starts_with(needle, "One of the special magic "));
            cr_assert_eq(count_sub(x->input, needle), 1, "needle %s", needle);
            double at = (double)(x->needle_offset[j] - x->context_start) / (double)clen;
            cr_assert(at >= x->needle_depth[j] - depth_tol && at <= x->needle_depth[j] + depth_tol,
                      "needle at %.3f of the context, recorded depth %.3f", at, x->needle_depth[j]);
            free(needle);
        }
        for (uint32_t j = 0; j < x->n_outputs; j++) {
            char needle_end[128];
            snprintf(needle_end, sizeof needle_end, " is: %s.", x->outputs[j]);
            cr_assert_eq(count_sub(ctx, needle_end), 1, "answer %s", x->outputs[j]);
        }
        free(ctx);
    }
}

Test(ruler_niah, needles_noise_and_needle_haystacks)
{
    skip_without("ruler/wonderwords/nounlist.txt");
    const char *tasks[] = {"niah_single_1", "niah_multikey_2", "niah_multikey_3"};
    for (int t = 0; t < 3; t++) {
        ckv_ruler_set s = gen(tasks[t], 4096, 3, 1);
        cr_assert_eq(s.n_samples, 3);
        /* line haystacks record the line index: within a line of its place */
        check_needles(&s, 0.02);
        ckv_ruler_set_free(&s);
    }
}

Test(ruler_niah, needles_essay)
{
    skip_without("ruler/PaulGrahamEssays.json");
    /* needles inserted and values asked for, from synthetic.yaml */
    const struct {
        const char *task;
        uint32_t needles, outputs;
    } tasks[] = {{"niah_single_2", 1, 1}, {"niah_single_3", 1, 1}, {"niah_multikey_1", 4, 1},
                 {"niah_multivalue", 4, 4}, {"niah_multiquery", 4, 4}};
    for (int t = 0; t < 5; t++) {
        ckv_ruler_set s = gen(tasks[t].task, 4096, 2, 3);
        /* essays: depth counts sentences, not bytes; sentence lengths vary */
        check_needles(&s, 0.1);
        for (size_t i = 0; i < s.n_samples; i++) {
            const ckv_ruler_sample *x = &s.samples[i];
            /* a needle at depth 0 follows an empty sentence run: " ".join
             * then starts with a space, as in RULER */
            cr_assert(starts_with(x->input + x->context_start, "July 2010What hard liquor") ||
                      starts_with(x->input + x->context_start, " One of the special magic"));
            cr_assert_eq(x->n_needles, tasks[t].needles, "%s", tasks[t].task);
            cr_assert_eq(x->n_outputs, tasks[t].outputs, "%s", tasks[t].task);
        }
        ckv_ruler_set_free(&s);
    }
}

Test(ruler_niah, multiquery_template)
{
    skip_without("ruler/PaulGrahamEssays.json");
    ckv_ruler_set s = gen("niah_multiquery", 4096, 1, 5);
    const ckv_ruler_sample *x = &s.samples[0];
    cr_assert(starts_with(x->input, "Some special magic numbers are hidden within the following "
                                    "text. Make sure to memorize it. I will quiz you about the "
                                    "numbers afterwards.\n"));
    const char *q = strstr(x->input + x->context_end, "\nWhat are all the special magic numbers for ");
    cr_assert_not_null(q);
    cr_assert(ends_with(x->input, " mentioned in the provided text?"));
    /* "k1, k2, k3, and k4" */
    cr_assert_eq(count_sub(q, ", "), 3);
    cr_assert_eq(count_sub(q, ", and "), 1);
    cr_assert(starts_with(x->answer_prefix, " The special magic numbers for "));
    cr_assert(ends_with(x->answer_prefix, " mentioned in the provided text are"));
    ckv_ruler_set_free(&s);
}

Test(ruler_uuid, version_4_format)
{
    skip_without("ruler/wonderwords/nounlist.txt");
    ckv_ruler_set s = gen("niah_multikey_3", 4096, 2, 9);
    for (size_t i = 0; i < s.n_samples; i++) {
        const char *u = s.samples[i].outputs[0];
        cr_assert_eq(strlen(u), 36);
        cr_assert(u[8] == '-' && u[13] == '-' && u[18] == '-' && u[23] == '-');
        cr_assert_eq(u[14], '4');
        cr_assert(strchr("89ab", u[19]), "variant nibble %c", u[19]);
        cr_assert(starts_with(s.samples[i].input, "A special magic uuid is hidden within the "
                                                  "following text. Make sure to memorize it. I "
                                                  "will quiz you about the uuid afterwards.\n"));
    }
    ckv_ruler_set_free(&s);
}

Test(ruler_vt, template_chain_and_example)
{
    ckv_ruler_set s = gen("vt", 4096, 2, 11);
    cr_assert_eq(s.max_new_tokens, 30);
    for (size_t i = 0; i < s.n_samples; i++) {
        const ckv_ruler_sample *x = &s.samples[i];
        cr_assert_eq(x->n_outputs, 5);
        /* the query is the chain's value: "VAR X0 = value" */
        const char *q = strstr(x->input + x->context_end,
                               "\nQuestion: Find all variables that are assigned the value ");
        cr_assert_eq(q, x->input + x->context_end);
        char value[16];
        snprintf(value, sizeof value, "%.5s", q + strlen("\nQuestion: Find all variables that "
                                                         "are assigned the value "));
        char want[256];
        snprintf(want, sizeof want, "\nQuestion: Find all variables that are assigned the value "
                                    "%s in the text above.", value);
        cr_assert(ends_with(x->input, want));
        snprintf(want, sizeof want, " Answer: According to the chain(s) of variable assignment "
                                    "in the text above, 5 variables are assgined the value %s, "
                                    "they are: ", value);
        cr_assert_str_eq(x->answer_prefix, want);
        const char *main = x->input + x->context_start;
        cr_assert(!strncmp(main - 86, "Memorize and track the chain(s) of variable assignment "
                                      "hidden in the following text.\n\n", 86));
        char stmt[64];
        snprintf(stmt, sizeof stmt, "VAR %s = %s\n", x->outputs[0], value);
        cr_assert_eq(count_sub(main, stmt), 1);
        for (int j = 1; j < 5; j++) {
            snprintf(stmt, sizeof stmt, "VAR %s = VAR %s \n", x->outputs[j], x->outputs[j - 1]);
            cr_assert_eq(count_sub(main, stmt), 1, "%s", stmt);
        }
        /* one solved example first, with 3-letter names and its own answer */
        cr_assert(starts_with(x->input, "Memorize and track the chain(s) of variable "
                                        "assignment hidden in the following text.\n\n"));
        const char *ans = strstr(x->input, "they are:  ");
        cr_assert(ans && ans < main);
        cr_assert_eq(ans[11 + 3], ' ');
    }
    ckv_ruler_set_free(&s);
}

static int cmp_int_desc(const void *a, const void *b)
{
    return *(const int *)b - *(const int *)a;
}

Test(ruler_cwe, counts)
{
    skip_without("ruler/wonderwords/nounlist.txt");
    ckv_ruler_set s = gen("cwe", 4096, 1, 13);
    const ckv_ruler_sample *x = &s.samples[0];
    cr_assert_eq(x->n_outputs, 10);
    cr_assert_str_eq(x->answer_prefix, " Answer: The top 10 words that appear most often in the "
                                       "list are:");
    cr_assert(ends_with(x->input, "\nQuestion: What are the 10 most common words in the above "
                                  "list?"));
    cr_assert(starts_with(x->input, "Below is a numbered list of words. In these words, some "
                                    "appear more often than others. Memorize the ones that appear "
                                    "most often.\n1. "));
    /* the example: template, its answer, newline, then the task */
    cr_assert_not_null(strstr(x->input, " Answer: The top 10 words that appear most often in the "
                                        "list are: 1. "));
    /* count words of the main list "1. w 2. w ..." */
    char *ctx = strndup(x->input + x->context_start, x->context_end - x->context_start);
    char *words[8192];
    int counts[8192], nw = 0, entries = 0;
    for (char *tok = strtok(ctx, " "); tok; tok = strtok(NULL, " ")) {
        char *w = strtok(NULL, " ");
        cr_assert_not_null(w);
        cr_assert_eq(atoi(tok), entries + 1);
        entries++;
        int k = 0;
        while (k < nw && strcmp(words[k], w))
            k++;
        if (k == nw) {
            words[nw] = w;
            counts[nw++] = 0;
        }
        counts[k]++;
    }
    for (uint32_t j = 0; j < 10; j++) {
        int k = 0;
        while (k < nw && strcmp(words[k], x->outputs[j]))
            k++;
        cr_assert(k < nw);
        cr_assert_eq(counts[k], 30, "%s: %d", x->outputs[j], counts[k]);
    }
    qsort(counts, (size_t)nw, sizeof *counts, cmp_int_desc);
    cr_assert_eq(counts[10], 3);
    cr_assert_eq(counts[nw - 1], 3);
    cr_assert_eq(entries, 300 + 3 * (nw - 10));
    free(ctx);
    ckv_ruler_set_free(&s);
}

Test(ruler_fwe, counts)
{
    ckv_ruler_set s = gen("fwe", 4096, 1, 17);
    const ckv_ruler_sample *x = &s.samples[0];
    cr_assert_eq(x->n_outputs, 3);
    cr_assert(starts_with(x->input, "Read the following coded text and track the frequency of "
                                    "each coded word. Find the three most frequently appeared "
                                    "coded words. "));
    cr_assert(ends_with(x->input, "\nQuestion: Do not provide any explanation. Please ignore the "
                                  "dots '....'. What are the three most frequently appeared "
                                  "words in the above coded text?"));
    cr_assert_str_eq(x->answer_prefix, " Answer: According to the coded text above, the three "
                                       "most frequently appeared words are:");
    char *ctx = strndup(x->input + x->context_start, x->context_end - x->context_start);
    char *words[4096];
    int counts[4096], nw = 0, total = 0;
    for (char *w = strtok(ctx, " "); w; w = strtok(NULL, " ")) {
        int k = 0;
        while (k < nw && strcmp(words[k], w))
            k++;
        if (k == nw) {
            cr_assert_lt(nw, 4096);
            words[nw] = w;
            counts[nw++] = 0;
        }
        counts[k]++;
        total++;
    }
    /* Zipf with alpha 2: count(rank k) = int(N / k^2 / zeta(2)); "..." is
     * rank 1, the answers ranks 2..4, so their counts are N/4, N/9, N/16
     * of the zeta-normalised total (all words with a non-zero count) */
    int c[4] = {0};
    for (int r = 0; r < 4; r++) {
        const char *w = r ? x->outputs[r - 1] : "...";
        for (int k = 0; k < nw; k++)
            if (!strcmp(words[k], w))
                c[r] = counts[k];
    }
    cr_assert(c[0] > c[1] && c[1] > c[2] && c[2] > c[3]);
    /* c[0] = int(N * 6 / pi^2): the ratios follow 1/k^2 within rounding */
    cr_assert(abs(c[0] - 4 * c[1]) <= 4 && abs(c[0] - 9 * c[2]) <= 9 && abs(c[0] - 16 * c[3]) <= 16,
              "%d %d %d %d", c[0], c[1], c[2], c[3]);
    free(ctx);
    ckv_ruler_set_free(&s);
}

Test(ruler_qa, squad_template_and_gold)
{
    skip_without("squad/dev-v2.0.json");
    ckv_ruler_set s = gen("qa_1", 4096, 2, 19);
    cr_assert_str_eq(s.metric, "string_match_part");
    cr_assert_eq(s.max_new_tokens, 32);
    for (size_t i = 0; i < s.n_samples; i++) {
        const ckv_ruler_sample *x = &s.samples[i];
        cr_assert(starts_with(x->input, "Answer the question based on the given documents. Only "
                                        "give me the answer and do not output any other words."
                                        "\n\nThe following are given documents.\n\nDocument 1:\n"));
        cr_assert(starts_with(x->input + x->context_end,
                              "\n\nAnswer the question based on the given documents. Only give "
                              "me the answer and do not output any other words.\n\nQuestion: "));
        cr_assert_str_eq(x->answer_prefix, " Answer:");
        /* the first answerable SQuAD dev questions are about Normandy (file order) */
        char *ctx = strndup(x->input + x->context_start, x->context_end - x->context_start);
        for (uint32_t j = 0; j < x->n_outputs; j++)
            cr_assert_not_null(strstr(ctx, x->outputs[j]), "answer %s", x->outputs[j]);
        free(ctx);
    }
    cr_assert(ends_with(s.samples[0].input, "Question: In what country is Normandy located?"));
    cr_assert_str_eq(s.samples[0].outputs[0], "France");
    ckv_ruler_set_free(&s);
}

/* A data dir of symlinks to the real templates, word lists and SQuAD (no
 * essays), with a small HotpotQA file when asked. */
static char *partial_dir(bool hotpot)
{
    char *dir = strdup("/tmp/ckv_ruler_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/ruler", dir);
    mkdir(a, 0755);
    const char *files[] = {"ruler/templates.json", "ruler/wonderwords", "squad"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", data_dir(), files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        cr_assert_eq(symlink(a, b), 0);
    }
    if (hotpot) {
        /* two questions, with their paragraphs, in HotpotQA's layout */
        snprintf(b, sizeof b, "%s/hotpotqa", dir);
        mkdir(b, 0755);
        snprintf(b, sizeof b, "%s/hotpotqa/hotpot_dev_distractor_v1.json", dir);
        FILE *fp = fopen(b, "w");
        fputs("[{\"question\": \"Which river flows through Zorbia?\", \"answer\": \"Quell\", "
              "\"context\": [[\"Zorbia\", [\"Zorbia is a land.\", \" The Quell flows there.\"]], "
              "[\"Mount Ark\", [\"Mount Ark is tall.\"]]]}, "
              "{\"question\": \"Who built Ark Tower?\", \"answer\": \"Ada Brun\", "
              "\"context\": [[\"Ark Tower\", [\"Ark Tower was built by Ada Brun.\"]], "
              "[\"Mount Ark\", [\"Mount Ark is tall.\"]]]}]", fp);
        fclose(fp);
    }
    return dir;
}

static void rm_dir(char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(dir);
}

Test(ruler_missing, reported_as_skipped)
{
    skip_without("ruler/templates.json");
    char *dir = partial_dir(false);
    ckv_ruler *r;
    ckv_error e = {0};
    cr_assert_eq(ckv_ruler_open(&r, dir, &e), CKV_OK, "%s", e.msg);
    ckv_ruler_set s;
    cr_assert_eq(ckv_ruler_generate(r, "niah_single_2", 4096, 2, 1, &words_counter, &s, &e),
                 CKV_OK, "%s", e.msg);
    cr_assert(s.skipped);
    cr_assert_eq(s.n_samples, 0);
    cr_assert_not_null(strstr(s.skip_reason, "PaulGrahamEssays.json"), "%s", s.skip_reason);
    ckv_ruler_set_free(&s);
    cr_assert_eq(ckv_ruler_generate(r, "qa_2", 4096, 2, 1, &words_counter, &s, &e), CKV_OK);
    cr_assert(s.skipped);
    cr_assert_not_null(strstr(s.skip_reason, "hotpot_dev_distractor_v1.json"), "%s",
                       s.skip_reason);
    ckv_ruler_set_free(&s);
    /* tasks whose data is there still run */
    cr_assert_eq(ckv_ruler_generate(r, "niah_single_1", 4096, 1, 1, &words_counter, &s, &e),
                 CKV_OK, "%s", e.msg);
    cr_assert(!s.skipped && s.n_samples == 1);
    ckv_ruler_set_free(&s);
    ckv_ruler_close(r);
    /* no templates at all is an error, not a skip */
    cr_assert_neq(ckv_ruler_open(&r, "/nonexistent/ckv", &e), CKV_OK);
    cr_assert_not_null(strstr(e.msg, "templates.json"), "%s", e.msg);
    rm_dir(dir);
}

/* A data dir whose templates.json is text; returns the dir. */
static char *dir_with_templates(const char *json)
{
    char *dir = partial_dir(false);
    char p[4200];
    snprintf(p, sizeof p, "%s/ruler/templates.json", dir);
    cr_assert_eq(unlink(p), 0);
    FILE *fp = fopen(p, "w");
    fputs(json, fp);
    fclose(fp);
    return dir;
}

Test(ruler_missing, malformed_data_is_an_error)
{
    skip_without("ruler/templates.json");
    static const struct {
        const char *json, *task, *want;
    } cases[] = {
        {"{\"tasks\": {", "niah_single_1", "templates.json"},
        {"{\"task_types\": {\"niah\": {\"tokens_to_generate\": 128, \"template\": "
         "\"{context} {oops\", \"answer_prefix\": \" A\"}}, \"metric_by_task_type\": "
         "{\"niah\": \"string_match_all\"}, \"tasks\": {\"niah_single_1\": {\"task\": "
         "\"niah\", \"args\": {\"type_haystack\": \"noise\", \"type_needle_k\": "
         "\"words\", \"type_needle_v\": \"numbers\", \"num_needle_k\": 1, "
         "\"num_needle_v\": 1, \"num_needle_q\": 1}}}}",
         "niah_single_1", "templates.json: task_types.niah: template: unmatched '{'"},
        {"{\"task_types\": {\"niah\": {\"tokens_to_generate\": 128, \"template\": "
         "\"{context}\", \"answer_prefix\": \" A\"}}, \"metric_by_task_type\": "
         "{\"niah\": \"string_match_all\"}, \"tasks\": {\"niah_single_1\": {\"task\": "
         "\"niah\", \"args\": {\"type_haystack\": \"noise\", \"type_needle_k\": "
         "\"words\", \"type_needle_v\": \"numbers\", \"num_needle_k\": 1000, "
         "\"num_needle_v\": 1, \"num_needle_q\": 1}}}}",
         "niah_single_1", "num_needle_k"},
        {"{\"task_types\": {}, \"tasks\": {\"vt\": {\"task\": \"variable_tracking\"}}}",
         "vt", "template"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = dir_with_templates(cases[i].json);
        ckv_ruler *r = NULL;
        ckv_error e = {0};
        ckv_status st = ckv_ruler_open(&r, dir, &e);
        if (!st) {
            ckv_ruler_set s;
            st = ckv_ruler_generate(r, cases[i].task, 4096, 1, 1, &words_counter, &s, &e);
            ckv_ruler_close(r);
        }
        cr_assert_neq(st, CKV_OK, "case %zu", i);
        cr_assert_not_null(strstr(e.msg, cases[i].want), "case %zu: %s", i, e.msg);
        rm_dir(dir);
    }
}

/* Writes text to dir/rel, replacing a symlink or creating the folder. */
static void put_file(const char *dir, const char *rel, const char *text)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    unlink(p);
    char *slash = strrchr(p, '/');
    *slash = 0;
    mkdir(p, 0755);
    *slash = '/';
    FILE *fp = fopen(p, "w");
    cr_assert_not_null(fp, "%s", p);
    fputs(text, fp);
    fclose(fp);
}

Test(ruler_missing, malformed_sources_are_errors)
{
    skip_without("ruler/templates.json");
    static const struct {
        const char *rel, *text, *task, *want;
    } cases[] = {
        {"squad/dev-v2.0.json", "{\"data\": [{\"paragraphs\": [{\"context\": \"c\", "
         "\"qas\": [{\"question\": \"q\"}]}]}]}", "qa_1", "qas[0]: needs is_impossible"},
        {"squad/dev-v2.0.json", "{\"data\": 3}", "qa_1", "field \"data\""},
        {"hotpotqa/hotpot_dev_distractor_v1.json", "[{\"question\": \"q\"}]", "qa_2",
         "needs question, answer and context"},
        {"ruler/PaulGrahamEssays.json", "{\"text\": \"\"}", "niah_single_2",
         "field \"text\": missing or empty"},
        {"ruler/PaulGrahamEssays.json", "[1, 2", "niah_single_2", "PaulGrahamEssays.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = partial_dir(false);
        char p[4200];
        snprintf(p, sizeof p, "%s/squad", dir); /* a real folder instead of the link */
        cr_assert_eq(unlink(p), 0);
        put_file(dir, cases[i].rel, cases[i].text);
        ckv_ruler *r;
        ckv_error e = {0};
        cr_assert_eq(ckv_ruler_open(&r, dir, &e), CKV_OK, "%s", e.msg);
        ckv_ruler_set s;
        ckv_status st = ckv_ruler_generate(r, cases[i].task, 4096, 1, 1, &words_counter, &s, &e);
        ckv_ruler_close(r);
        cr_assert_eq(st, CKV_ERR_FORMAT, "case %zu: %d %s", i, st, e.msg);
        cr_assert_not_null(strstr(e.msg, cases[i].want), "case %zu: %s", i, e.msg);
        rm_dir(dir);
    }
}

Test(ruler_qa, hotpotqa_when_present)
{
    skip_without("ruler/templates.json");
    char *dir = partial_dir(true);
    ckv_ruler *r;
    ckv_error e = {0};
    cr_assert_eq(ckv_ruler_open(&r, dir, &e), CKV_OK, "%s", e.msg);
    ckv_ruler_set s;
    cr_assert_eq(ckv_ruler_generate(r, "qa_2", 4096, 2, 1, &words_counter, &s, &e), CKV_OK, "%s",
                 e.msg);
    cr_assert(!s.skipped, "%s", s.skip_reason);
    /* three distinct documents "title\nsentences joined with nothing",
     * repeated to fill the length since there are fewer than needed */
    const ckv_ruler_sample *x = &s.samples[1];
    cr_assert(ends_with(x->input, "Question: Who built Ark Tower?"));
    cr_assert_str_eq(x->outputs[0], "Ada Brun");
    cr_assert_not_null(strstr(x->input, ":\nZorbia\nZorbia is a land. The Quell flows there.\n\n"));
    cr_assert_not_null(strstr(x->input, ":\nArk Tower\nArk Tower was built by Ada Brun."));
    cr_assert_leq(x->length, 4096);
    ckv_ruler_set_free(&s);
    ckv_ruler_close(r);
    rm_dir(dir);
}

Test(ruler_fit, maximal_under_target)
{
    /* Counted by hand in words: the singular template's preamble (23), the
     * needle (10), the question (13) and the answer prefix (12), with the
     * key once in each of the last three, plus 19 per noise line and 128 to
     * generate: 186 + 19 * lines, plus 3 * (key words - 1). The fit is the
     * largest line count under the target (no draw varies in length here,
     * so no sample shrinks). */
    skip_without("ruler/wonderwords/nounlist.txt");
    const uint32_t lens[] = {2048, 4096, 8192};
    for (int i = 0; i < 3; i++) {
        ckv_ruler_set s = gen("niah_single_1", lens[i], 2, 23);
        for (size_t j = 0; j < s.n_samples; j++) {
            const ckv_ruler_sample *x = &s.samples[j];
            char key[128];
            needle_key(x->input + x->needle_offset[0], key, sizeof key);
            uint32_t key_words = 1;
            for (const char *k = key; *k; k++)
                key_words += *k == ' ';
            uint32_t fixed = 186 + 3 * (key_words - 1);
            cr_assert_eq(x->length, fixed + 19 * x->haystack_units);
            cr_assert_leq(x->length, lens[i]);
            cr_assert_gt(x->length + 19, lens[i], "%u", x->length);
        }
        ckv_ruler_set_free(&s);
    }
}

static void assert_same(const ckv_ruler_set *a, const ckv_ruler_set *b, bool same)
{
    cr_assert_eq(a->n_samples, b->n_samples);
    bool all = true;
    for (size_t i = 0; i < a->n_samples; i++)
        all = all && !strcmp(a->samples[i].input, b->samples[i].input) &&
              !strcmp(a->samples[i].answer_prefix, b->samples[i].answer_prefix);
    cr_assert_eq(all, same);
}

Test(ruler_determinism, same_seed_same_prompts)
{
    skip_without("ruler/PaulGrahamEssays.json");
    skip_without("squad/dev-v2.0.json");
    for (size_t t = 0; t < ckv_ruler_n_tasks(); t++) {
        const char *task = ckv_ruler_task_name(t);
        if (!strcmp(task, "qa_2"))
            continue;
        ckv_ruler_set a = gen(task, 2048, 2, 42), b = gen(task, 2048, 2, 42),
                      c = gen(task, 2048, 2, 43);
        assert_same(&a, &b, true);
        assert_same(&a, &c, false);
        /* sample 0 does not depend on how many samples are drawn */
        ckv_ruler_set d = gen(task, 2048, 1, 42);
        cr_assert_str_eq(a.samples[0].input, d.samples[0].input, "%s", task);
        ckv_ruler_set_free(&a);
        ckv_ruler_set_free(&b);
        ckv_ruler_set_free(&c);
        ckv_ruler_set_free(&d);
    }
}

/* Lengths with the default model's own tokenizer: every prompt plus the
 * tokens to generate fits the target, the recorded length is the
 * tokenizer's count, and the fitted haystack comes close to the target. */
Test(ruler_fit, default_model_tokenizer_4k_8k, .timeout = 240)
{
    skip_without("ruler/PaulGrahamEssays.json");
    skip_without("squad/dev-v2.0.json");
    char path[4096];
    const char *m = getenv("CKV_MODEL");
    if (m && *m)
        snprintf(path, sizeof path, "%s", m);
    else
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", CKV_SOURCE_ROOT);
    if (access(path, R_OK))
        cr_skip_test("model %s absent (set CKV_MODEL or run scripts/get-model)", path);
    gguf_file gf;
    ckv_tokenizer *tok;
    ckv_error e = {0};
    cr_assert_eq(gguf_open(&gf, path, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_tokenizer_load(&tok, &gf, &e), CKV_OK, "%s", e.msg);
    ckv_token_counter tc = ckv_tokenizer_counter(tok);
    ckv_ruler *r;
    cr_assert_eq(ckv_ruler_open(&r, data_dir(), &e), CKV_OK, "%s", e.msg);
    const uint32_t lens[] = {4096, 8192};
    for (int li = 0; li < 2; li++) {
        for (size_t t = 0; t < ckv_ruler_n_tasks(); t++) {
            ckv_ruler_set s;
            const char *task = ckv_ruler_task_name(t);
            cr_assert_eq(ckv_ruler_generate(r, task, lens[li], 3, 42, &tc, &s, &e), CKV_OK, "%s",
                         e.msg);
            if (!strcmp(task, "qa_2") && s.skipped)
                continue; /* HotpotQA is not in the shared data */
            cr_assert(!s.skipped, "%s: %s", task, s.skip_reason);
            uint32_t best = 0;
            for (size_t i = 0; i < s.n_samples; i++) {
                const ckv_ruler_sample *x = &s.samples[i];
                size_t a = strlen(x->input), b = strlen(x->answer_prefix);
                char *full = malloc(a + b + 1);
                memcpy(full, x->input, a);
                memcpy(full + a, x->answer_prefix, b + 1);
                int32_t *ids;
                size_t n;
                cr_assert_eq(ckv_tokenize(tok, full, a + b, false, false, &ids, &n, &e), CKV_OK);
                cr_assert_eq(x->length, n + s.max_new_tokens, "%s", task);
                cr_assert_leq(x->length, lens[li], "%s", task);
                best = x->length > best ? x->length : best;
                free(ids);
                free(full);
            }
            /* a draw that comes out too long shrinks by RULER's step (500
             * essay words, 25 lines, 10 documents: 500-700 tokens here) */
            cr_assert_geq(best, lens[li] * 3 / 4, "%s at %u: best %u", task, lens[li], best);
            ckv_ruler_set_free(&s);
        }
    }
    ckv_ruler_close(r);
    ckv_tokenizer_free(tok);
    gguf_close(&gf);
}

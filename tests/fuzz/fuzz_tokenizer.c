/* libFuzzer target: the tokenizer on arbitrary text and token ids, as model
 * output and dataset prompts reach it. The vocabulary is `ckv synth`'s tiny
 * GPT-2 byte-level BPE one (every byte has a token, 10 merges, ChatML
 * specials, reserved control tokens), seen through seven metadata views:
 * each supported tokenizer.ggml.pre, and tokenizer.ggml.model = llama
 * (SentencePiece, unknown token set) with and without the dummy space
 * prefix. The byte-level views also differ in chat template: ChatML
 * (synth's), Llama 3, ChatML with a default system prompt (SmolLM2's, and
 * Qwen2.5's inside a Jinja string), Llama 2. The first input byte picks
 * the view and the operation:
 * - encode (plain, or parsing specials): every id in the vocabulary and,
 *   for byte-level BPE, decode(encode(x)) == x byte for byte;
 * - decode the rest as little-endian int32 ids: an id outside the
 *   vocabulary is an error with a message, otherwise the output is the
 *   concatenation of ckv_token_bytes;
 * - chat-render the rest as the user message, encode with specials,
 *   decode: the rendered text back;
 * - a huge run: up to 32 bytes repeated to 1 KiB .. 64 KiB, encoded.
 * Any crash, sanitizer report, leak or failed check aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "../synth_tokenizer.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_VIEWS = 7, N_OPS = 5, SPM_FIRST = 5, UNK_ID = 299 };

static uint8_t *synth_buf;
static gguf_file synth_file;
static ckv_tokenizer *tok[N_VIEWS];

/* A GGUF string value (u64 length, then bytes) or small scalar, kept for
 * the views' lifetime. */
static uint8_t *value(const char *s, size_t len, uint64_t *nbytes)
{
    uint8_t *v = malloc(8 + len);
    if (!v)
        abort();
    for (int i = 0; i < 8; i++)
        v[i] = (uint8_t)((uint64_t)len >> (8 * i));
    memcpy(v + 8, s, len);
    *nbytes = 8 + len;
    return v;
}

static void set_str(gguf_kv *kv, const char *s)
{
    kv->data = value(s, strlen(s), &kv->nbytes);
}

static gguf_kv *find(gguf_file *f, const char *key)
{
    gguf_kv *kv = (gguf_kv *)gguf_find(f, key);
    if (!kv)
        abort();
    return kv;
}

/* The synth file with its metadata array copied (room for two more keys),
 * so that a view can change or add keys without touching the file. */
static gguf_file view_of(const gguf_file *f)
{
    gguf_file v = *f;
    v.kv = malloc((f->n_kv + 2) * sizeof *v.kv);
    if (!v.kv)
        abort();
    memcpy(v.kv, f->kv, f->n_kv * sizeof *v.kv);
    return v;
}

static void add_scalar(gguf_file *v, const char *key, uint32_t type, const void *val, size_t n)
{
    uint8_t *p = malloc(n);
    if (!p)
        abort();
    memcpy(p, val, n);
    v->kv[v->n_kv++] = (gguf_kv){{key, strlen(key)}, type, 0, 0, p, n};
}

static void load_view(int i, gguf_file *v)
{
    ckv_error e = {0};
    if (ckv_tokenizer_load(&tok[i], v, &e))
        abort();
}

static void cleanup(void)
{
    for (int i = 0; i < N_VIEWS; i++)
        ckv_tokenizer_free(tok[i]);
    gguf_close(&synth_file);
    free(synth_buf);
}

/* Per byte-level view: its pre-tokenizer, chat template (NULL: synth's
 * ChatML one), the format that must be recognised and the default system
 * prompt a prompt without one must get. */
static const struct {
    const char *pre, *chat_template;
    ckv_chat_format format;
    const char *system;
} bpe_views[SPM_FIRST] = {
    {"default", NULL, CKV_CHAT_CHATML, NULL},
    {"gpt2", "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}",
     CKV_CHAT_LLAMA3, NULL},
    {"smollm",
     "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI "
     "assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}",
     CKV_CHAT_CHATML, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
    {"qwen2",
     "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud.<|im_end|>\\n' }}",
     CKV_CHAT_CHATML, "You are Qwen, created by Alibaba Cloud."},
    {"llama-bpe", "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}",
     CKV_CHAT_LLAMA2, NULL},
};

static void setup(void)
{
    ckv_synth_opts o;
    synth_tokenizer_opts(&o);
    size_t len;
    ckv_error e = {0};
    if (ckv_synth_build(&o, &synth_buf, &len, &e) || gguf_parse(&synth_file, synth_buf, len, &e))
        abort();
    for (int i = 0; i < N_VIEWS; i++) {
        gguf_file v = view_of(&synth_file);
        if (i < SPM_FIRST) {
            set_str(find(&v, "tokenizer.ggml.pre"), bpe_views[i].pre);
            if (bpe_views[i].chat_template)
                set_str(find(&v, "tokenizer.chat_template"), bpe_views[i].chat_template);
        } else {
            uint32_t unk = UNK_ID;
            uint8_t prefix = i == SPM_FIRST;
            set_str(find(&v, "tokenizer.ggml.model"), "llama");
            add_scalar(&v, "tokenizer.ggml.unknown_token_id", GGUF_UINT32, &unk, 4);
            add_scalar(&v, "tokenizer.ggml.add_space_prefix", GGUF_BOOL, &prefix, 1);
        }
        load_view(i, &v);
        if (ckv_tokenizer_chat_format(tok[i]) !=
            (i < SPM_FIRST ? bpe_views[i].format : CKV_CHAT_CHATML))
            abort();
        /* The tokenizer copied what it keeps; the view's values go (the
         * added keys' names are literals). */
        for (uint64_t k = 0; k < v.n_kv; k++)
            if (k >= synth_file.n_kv || v.kv[k].data != synth_file.kv[k].data)
                free((void *)v.kv[k].data);
        free(v.kv);
    }
    atexit(cleanup);
}

static bool in_vocab(const ckv_tokenizer *t, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= ckv_tokenizer_vocab(t))
            return false;
    return true;
}

/* Decoding must give back exactly the text (byte-level BPE: always; the
 * SentencePiece views only when no byte fell back to the unknown token). */
static void check_round_trip(int view, const int32_t *ids, size_t n, const char *text, size_t len)
{
    const ckv_tokenizer *t = tok[view];
    if (view >= SPM_FIRST)
        for (size_t i = 0; i < n; i++)
            if (ids[i] == UNK_ID)
                return;
    char *back;
    size_t blen;
    ckv_error e = {0};
    if (ckv_detokenize(t, ids, n, &back, &blen, &e) || blen != len || back[blen] ||
        (len && memcmp(back, text, len)))
        abort();
    free(back);
}

static void encode(int view, const char *text, size_t len, bool special)
{
    int32_t *ids;
    size_t n;
    ckv_error e = {0};
    /* Every byte has a token (or falls back to the unknown one): no error. */
    if (ckv_tokenize(tok[view], text, len, special, special, &ids, &n, &e) || !ids ||
        !in_vocab(tok[view], ids, n))
        abort();
    check_round_trip(view, ids, n, text, len);
    free(ids);
}

static void decode(int view, const uint8_t *p, size_t size)
{
    const ckv_tokenizer *t = tok[view];
    size_t n = size / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        abort();
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)((uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                           (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24);
    /* The same ids folded into the vocabulary: these must decode. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            for (size_t i = 0; i < n; i++)
                ids[i] = (int32_t)((uint32_t)ids[i] % (uint32_t)ckv_tokenizer_vocab(t));
        char *out;
        size_t len;
        ckv_error e = {0};
        ckv_status st = ckv_detokenize(t, ids, n, &out, &len, &e);
        if (!in_vocab(t, ids, n)) {
            if (st != CKV_ERR_ARG || !e.msg[0] || out)
                abort();
            continue;
        }
        if (st || out[len])
            abort();
        /* Decoding concatenates token bytes; the dummy-space rule of the
         * prefix view may take a space off some of them. */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            size_t bl;
            const char *b = ckv_token_bytes(t, ids[i], &bl);
            if (!b || (view != SPM_FIRST && (k + bl > len || memcmp(out + k, b, bl))))
                abort();
            k += bl;
        }
        if (view == SPM_FIRST ? len > k : len != k)
            abort();
        free(out);
    }
    for (size_t i = 0; i < n; i++) {
        size_t bl;
        bool outside = ids[i] < 0 || ids[i] >= ckv_tokenizer_vocab(t);
        if ((ckv_token_bytes(t, ids[i], &bl) == NULL) != outside ||
            (outside && ckv_token_is_eog(t, ids[i])))
            abort();
    }
    free(ids);
}

static void chat(int view, const uint8_t *p, size_t size, bool with_system)
{
    char *user = strndup((const char *)p, size), *text;
    ckv_error e = {0};
    if (!user || ckv_chat_render(tok[view], with_system ? "You are terse." : NULL, user, &text, &e))
        abort();
    const char *dflt = view < SPM_FIRST && !with_system ? bpe_views[view].system : NULL;
    if (dflt && strncmp(text + strlen("<|im_start|>system\n"), dflt, strlen(dflt)))
        abort();
    encode(view, text, strlen(text), true);
    free(text);
    free(user);
}

static void huge_run(int view, const uint8_t *p, size_t size, unsigned shift)
{
    size_t unit = size < 32 ? size : 32, len = (size_t)1 << (10 + shift % 7);
    if (!unit)
        return;
    char *text = malloc(len);
    if (!text)
        abort();
    for (size_t i = 0; i < len; i++)
        text[i] = (char)p[i % unit];
    encode(view, text, len, shift & 8);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok[0])
        setup();
    if (size < 2)
        return 0;
    int view = data[0] % N_VIEWS, op = data[0] / N_VIEWS % N_OPS;
    const uint8_t *p = data + 2;
    size_t n = size - 2;
    switch (op) {
    case 0: encode(view, (const char *)p, n, false); break;
    case 1: encode(view, (const char *)p, n, true); break;
    case 2: decode(view, p, n); break;
    case 3: chat(view, p, n, data[1] & 1); break;
    default: huge_run(view, p, n, data[1]); break;
    }
    return 0;
}

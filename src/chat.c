/* Single-turn chat prompts. The format is recognised from markers in
 * tokenizer.chat_template (no Jinja evaluation); the rendering reproduces
 * what each family's template gives for [system?, user] with
 * add_generation_prompt, minus the BOS token, which the caller adds with
 * ckv_tokenize(add_bos) when the model asks for it. */
#include "tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool contains(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k))
            return true;
    return false;
}

/* A ChatML template that inserts a fixed system prompt when the messages
 * have none (SmolLM2, Qwen2.5) spells it as a literal right after
 * "<|im_start|>system" and a newline (a real one, or "\n" inside a Jinja
 * string) up to "<|im_end|>". Literals holding Jinja syntax or quotes are
 * the branch that prints the caller's system message, not a default. */
static ckv_status default_system(ckv_tokenizer *t, const char *s, size_t n, ckv_error *err)
{
    static const char head[] = "<|im_start|>system";
    static const char end[] = "<|im_end|>";
    size_t hl = sizeof head - 1, el = sizeof end - 1;
    for (size_t i = 0; i + hl <= n; i++) {
        if (memcmp(s + i, head, hl))
            continue;
        size_t a = i + hl;
        if (a < n && s[a] == '\n')
            a += 1;
        else if (a + 1 < n && s[a] == '\\' && s[a + 1] == 'n')
            a += 2;
        else
            continue;
        size_t b = a;
        while (b + el <= n && memcmp(s + b, end, el) && !strchr("'\"{}+\\", s[b]))
            b++;
        if (b + el > n || memcmp(s + b, end, el) || b == a)
            continue;
        t->chat_default_system = malloc(b - a + 1);
        if (!t->chat_default_system)
            return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(t->chat_default_system, s + a, b - a);
        t->chat_default_system[b - a] = 0;
        return CKV_OK;
    }
    return CKV_OK;
}

ckv_status tok_chat_init(ckv_tokenizer *t, const char *tmpl, size_t len, ckv_error *err)
{
    if (contains(tmpl, len, "<|im_start|>"))
        t->chat = CKV_CHAT_CHATML;
    else if (contains(tmpl, len, "<|start_header_id|>"))
        t->chat = CKV_CHAT_LLAMA3;
    else if (contains(tmpl, len, "[INST]"))
        t->chat = CKV_CHAT_LLAMA2;
    else if (ckv_strmap_get(&t->by_text, "<|im_start|>", 12) >= 0)
        t->chat = CKV_CHAT_CHATML;
    else
        t->chat = CKV_CHAT_NONE;
    return t->chat == CKV_CHAT_CHATML ? default_system(t, tmpl, len, err) : CKV_OK;
}

ckv_chat_format ckv_tokenizer_chat_format(const ckv_tokenizer *t)
{
    return t->chat;
}

ckv_status ckv_chat_affixes(const ckv_tokenizer *t, const char *system, char **prefix,
                            char **suffix, ckv_error *err)
{
    *prefix = *suffix = NULL;
    if (!system && t->chat == CKV_CHAT_CHATML)
        system = t->chat_default_system;
    size_t cap = (system ? strlen(system) : 0) + 128;
    char *pre = malloc(cap), *suf = malloc(128);
    if (!pre || !suf) {
        free(pre);
        free(suf);
        return ckv_errorf(err, CKV_ERR_NOMEM, "chat: out of memory");
    }
    int n = 0;
    pre[0] = suf[0] = 0;
    switch (t->chat) {
    case CKV_CHAT_CHATML:
        if (system)
            n = snprintf(pre, cap, "<|im_start|>system\n%s<|im_end|>\n", system);
        snprintf(pre + n, cap - (size_t)n, "<|im_start|>user\n");
        snprintf(suf, 128, "<|im_end|>\n<|im_start|>assistant\n");
        break;
    case CKV_CHAT_LLAMA3:
        if (system)
            n = snprintf(pre, cap, "<|start_header_id|>system<|end_header_id|>\n\n%s<|eot_id|>",
                         system);
        snprintf(pre + n, cap - (size_t)n, "<|start_header_id|>user<|end_header_id|>\n\n");
        snprintf(suf, 128, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CKV_CHAT_LLAMA2:
        if (system)
            snprintf(pre, cap, "[INST] <<SYS>>\n%s\n<</SYS>>\n\n", system);
        else
            snprintf(pre, cap, "[INST] ");
        snprintf(suf, 128, " [/INST]");
        break;
    case CKV_CHAT_NONE:
        break;
    }
    *prefix = pre;
    *suffix = suf;
    return CKV_OK;
}

ckv_status ckv_chat_render(const ckv_tokenizer *t, const char *system, const char *user,
                           char **out, ckv_error *err)
{
    *out = NULL;
    if (!user)
        return ckv_errorf(err, CKV_ERR_ARG, "chat: no user message");
    char *pre, *suf;
    ckv_status st = ckv_chat_affixes(t, system, &pre, &suf, err);
    if (st)
        return st;
    size_t a = strlen(pre), b = strlen(user), c = strlen(suf);
    char *buf = malloc(a + b + c + 1);
    if (buf) {
        memcpy(buf, pre, a);
        memcpy(buf + a, user, b);
        memcpy(buf + a + b, suf, c + 1);
    }
    free(pre);
    free(suf);
    if (!buf)
        return ckv_errorf(err, CKV_ERR_NOMEM, "chat: out of memory");
    *out = buf;
    return CKV_OK;
}

#!/usr/bin/env bash
# Checks `ckv tokenize`: options, exit statuses, ids against Hugging Face
# (transformers on the same GGUF) and byte-exact decoding through stdin.
set -uo pipefail
: "${CKV:?CKV must point at the ckv binary}"
model=${CKV_MODEL:-${CKV_SOURCE_ROOT:-.}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "model not found: $model (run scripts/get-model)"; exit 1; }
export CKV_MODEL=$model
. "$(dirname "$0")/checks.sh"

help=$("$CKV" tokenize --help)
check "--help exits 0" status_is 0 "$CKV" tokenize --help
for opt in --model --file --no-special --bos --chat --system --decode --help; do
  check "--help documents $opt" grep -q -- "$opt" <<<"$help"
done
check "no TEXT is a usage error" status_is 2 "$CKV" tokenize
check "two TEXTs are a usage error" status_is 2 "$CKV" tokenize a b
check "unknown option is a usage error" status_is 2 "$CKV" tokenize --bogus x
check "--system without --chat is a usage error" status_is 2 "$CKV" tokenize --system s x
check "non-numeric id is a usage error" status_is 2 "$CKV" tokenize --decode 12x
check "id beyond the vocabulary is a usage error" status_is 2 "$CKV" tokenize --decode 49152
check "missing model fails with status 1" status_is 1 "$CKV" tokenize --model "$tmp/none.gguf" x
check "missing model is named" grep -q "$tmp/none.gguf" "$tmp/err"

# transformers AutoTokenizer(gguf_file=...) on the default model.
want="19556 216 33 34 35 36 37 905 198 198 15236 216 2753"
got=$("$CKV" tokenize $'Hello 12345 world\n\nfoo  bar')
check "ids match Hugging Face" test "$got" = "$want"
check "special token string becomes its id" test "$("$CKV" tokenize '<|im_end|>')" = 2
check "--no-special spells it out" test "$("$CKV" tokenize --no-special '<|im_end|>' | wc -w)" -gt 1

# Invalid UTF-8 and NUL survive; 0xFF has no token in this vocabulary and is dropped.
printf 'a\x80\x00b\xc3\n\xff' >"$tmp/in"
printf 'a\x80\x00b\xc3\n' >"$tmp/want"
"$CKV" tokenize --file "$tmp/in" >"$tmp/ids"
"$CKV" tokenize --decode - <"$tmp/ids" >"$tmp/out"
check "decode(encode(bytes)) through --file and --decode -" cmp -s "$tmp/out" "$tmp/want"

printf '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' >"$tmp/chat"
"$CKV" tokenize --chat Hi >"$tmp/chat_ids"
# shellcheck disable=SC2046
"$CKV" tokenize --decode $(cat "$tmp/chat_ids") >"$tmp/chat_out"
check "--chat renders the template's default system prompt" cmp -s "$tmp/chat_out" "$tmp/chat"

finish "tokenize"

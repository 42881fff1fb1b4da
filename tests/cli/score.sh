#!/bin/sh
# ckv score: hand-derived scores, the first-line rule, jsonl task scores and
# the exit statuses of bad input (1, naming file:line) and bad usage (2).
set -u
CKV=${CKV:?CKV must name the ckv binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

check() { # name expected actual
    if [ "$2" != "$3" ]; then
        echo "FAIL $1: expected '$2', got '$3'"
        fails=$((fails + 1))
    fi
}

status() { # name expected-status command...
    name=$1 want=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    check "$name (exit status)" "$want" "$?"
}

# "The capital is Paris, France." normalises to 4 tokens, one shared with
# "paris": P = 1/4, R = 1, F1 = 2PR/(P+R) = 0.4.
check qa_f1 0.4 "$("$CKV" score --metric qa_f1_score --pred 'The capital is Paris, France.' --answer Paris)"
# Two tokens, one shared: F1 = 2/3; triviaqa keeps only the first line.
nl='
'
check no_cut 0.6666666666666666 "$("$CKV" score --metric qa_f1_score --pred "London${nl}Paris" --answer Paris)"
check first_line 0 "$("$CKV" score --dataset triviaqa --pred "London${nl}Paris" --answer Paris)"
# Two numbers in the prediction, one of them the paragraph: 1/2.
check retrieval 0.5 "$("$CKV" score --metric retrieval_score --pred 'Paragraph 3 or Paragraph 5' --answer 'Paragraph 3')"
# Two of three references found.
check match_all 0.6666666666666666 "$("$CKV" score --metric string_match_all --pred '11 and 22' --answer 11 --answer 22 --answer 33)"
check match_part 1 "$("$CKV" score --metric string_match_part --pred '11 and 22' --answer 11 --answer 33)"
# Both classes found, the answer among them: 1/2.
check classification 0.5 "$("$CKV" score --metric classification_score --pred 'City or Country' --answer City --class City --class Country --class Date)"

# Task score: (1 + 0.4 + 0) / 3 * 100 = 46.666... -> 46.67.
cat >"$tmp/pred.jsonl" <<'JSON'
{"pred": "Paris", "answers": ["Paris"], "all_classes": null}
{"pred": "The capital is Paris, France.", "answers": ["Paris"], "all_classes": null}

{"pred": "London", "answers": ["Paris"]}
JSON
check jsonl 46.67 "$("$CKV" score --metric qa_f1_score --jsonl "$tmp/pred.jsonl")"
# RULER's outputs field: 1 and 0.5 -> 75.00.
printf '%s\n' '{"pred": "a b", "outputs": ["a", "b"]}' '{"pred": "a", "outputs": ["a", "c"]}' >"$tmp/ruler.jsonl"
check ruler_jsonl 75.00 "$("$CKV" score --metric string_match_all --jsonl "$tmp/ruler.jsonl")"

printf '%s\n' '{"pred": "x", "answers": ["x"]}' '{"pred": "x", "answers": "x"}' >"$tmp/bad.jsonl"
status bad_type 1 "$CKV" score --metric qa_f1_score --jsonl "$tmp/bad.jsonl"
grep -q "bad.jsonl:2: field 'answers'" "$tmp/err" || { echo "FAIL bad_type message: $(cat "$tmp/err")"; fails=$((fails + 1)); }
printf '%s\n' '{"pred": "x", "answers": ["x"]}' '{"pred": "x", "answ' >"$tmp/trunc.jsonl"
status truncated 1 "$CKV" score --metric qa_f1_score --jsonl "$tmp/trunc.jsonl"
grep -q "trunc.jsonl:2: invalid JSON" "$tmp/err" || { echo "FAIL truncated message: $(cat "$tmp/err")"; fails=$((fails + 1)); }
printf '%s\n' '{"pred": "Paragraph 1", "answers": ["no id"]}' >"$tmp/noid.jsonl"
status no_paragraph_id 1 "$CKV" score --metric retrieval_score --jsonl "$tmp/noid.jsonl"
grep -q "noid.jsonl:1" "$tmp/err" || { echo "FAIL no_paragraph_id message: $(cat "$tmp/err")"; fails=$((fails + 1)); }
printf '%s\n' '{"pred": "City", "answers": ["City"]}' >"$tmp/nocls.jsonl"
status no_classes 1 "$CKV" score --metric classification_score --jsonl "$tmp/nocls.jsonl"
: >"$tmp/empty.jsonl"
status empty 1 "$CKV" score --metric qa_f1_score --jsonl "$tmp/empty.jsonl"
status missing_file 1 "$CKV" score --metric qa_f1_score --jsonl "$tmp/none.jsonl"
status bad_utf8 1 "$CKV" score --metric qa_f1_score --pred "$(printf 'a\377')" --answer a

# GPT-3.5's published English category means (benchmarks.md §2.10) average
# to 44.0; its 16 datasets (3+3+3+3+2+2) average to 700.1 / 16 = 43.75625.
cat >"$tmp/result.json" <<'JSON'
{"narrativeqa": 39.8, "qasper": 39.8, "multifieldqa_en": 39.8, "hotpotqa": 38.7, "2wikimqa": 38.7,
 "musique": 38.7, "gov_report": 26.5, "qmsum": 26.5, "multi_news": 26.5, "trec": 67.1,
 "triviaqa": 67.1, "samsum": 67.1, "passage_count": 37.8, "passage_retrieval_en": 37.8,
 "lcc": 54.1, "repobench-p": 54.1}
JSON
"$CKV" score --summary "$tmp/result.json" >"$tmp/sum" 2>&1
check summary_avg "avg: 44.00 (6 of 6 complete categories)" "$(grep '^avg' "$tmp/sum")"
check summary_en16 "english16: 43.76 (16 of 16 datasets)" "$(grep '^english16' "$tmp/sum")"
check summary_zh_missing "Summarization: n/a (0 of 1 datasets)" "$("$CKV" score --summary "$tmp/result.json" --language zh | grep '^Summarization')"
printf '{"vt": 50, "qa_1": 30}' >"$tmp/ruler.json"
check summary_ruler "ruler: 40.00 (2 of 13 tasks, incomplete)" "$("$CKV" score --summary "$tmp/ruler.json")"
printf '{"vt": 50, "qasper": 30}' >"$tmp/mixed.json"
status summary_mixed 1 "$CKV" score --summary "$tmp/mixed.json"
printf '{"vt": "50"}' >"$tmp/str.json"
status summary_type 1 "$CKV" score --summary "$tmp/str.json"
status summary_language 2 "$CKV" score --summary "$tmp/result.json" --language fr
status summary_extra 2 "$CKV" score --summary "$tmp/result.json" --metric qa_f1_score

status help 0 "$CKV" score --help
grep -q -- "--jsonl FILE" "$tmp/out" || { echo "FAIL help text"; fails=$((fails + 1)); }
status no_args 2 "$CKV" score
status unknown_metric 2 "$CKV" score --metric f1 --pred a --answer a
status unknown_dataset 2 "$CKV" score --dataset nq --pred a --answer a
status both_inputs 2 "$CKV" score --metric qa_f1_score --pred a --jsonl "$tmp/pred.jsonl"
status no_answer 2 "$CKV" score --metric qa_f1_score --pred a
status unknown_option 2 "$CKV" score --metric qa_f1_score --pred a --answer a --bogus
status missing_value 2 "$CKV" score --metric

[ "$fails" -eq 0 ] && echo "cli score: all checks passed"
exit "$fails"

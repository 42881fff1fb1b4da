/* The `ckv` subcommands. Each takes argv with argv[0] = the command name,
 * prints its own --help, and returns the process exit status. */
#ifndef CKV_CLI_COMMANDS_H
#define CKV_CLI_COMMANDS_H

int cmd_devices(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_dump_kv(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_compress(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif

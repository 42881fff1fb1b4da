#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "ckv_config.h"
#include "commands.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif
#include "kvfile.h"
#include "opts.h"
#include "policy.h"
#include "synthetic_kv.h"
#include "util.h"

static void help(FILE *fp)
{
    fprintf(fp, "usage: ckv bench compress (kv.h5 | --synthetic --tokens N [--layers L]\n"
           "                           [--kv-heads H] [--head-dim D] [--seed S])\n"
           "                          [--budget X] [--repeats R] [--device cpu|cuda]\n\n"
           "Times one compression by every policy of the same cache at the same budget\n"
           "(default policy parameters), the median of R runs each on a fresh copy, and\n"
           "prints CPU and wall time and the CPU-time ratio to centroid (CSM). CSM,\n"
           "K-Means and SnapKV compress their lists in parallel (OpenMP; OMP_NUM_THREADS=1\n"
           "for one thread), so compare the CPU column across policies.\n"
           "A synthetic cache has keys that drift like real ones (seeded random walk plus\n"
           "noise) and window queries near the newest keys, so caches longer than the\n"
           "model's context can be timed. With --device cuda the GPU policy kernels are\n"
           "timed instead: wall time of the call, which returns when the GPU is done, after\n"
           "an untimed upload of the cache (and one untimed warm-up run that takes the\n"
           "kernels' scratch); the ratio is then to centroid on the GPU.\n\n"
           "Options:\n"
           "  --synthetic       use a synthetic cache instead of a dump\n"
           "  --tokens N        synthetic cache length (required with --synthetic)\n"
           "  --layers L        synthetic layers (default 30, as SmolLM2-135M)\n"
           "  --kv-heads H      synthetic KV heads (default 3; 3 query heads each)\n"
           "  --head-dim D      synthetic head dimension (default 64)\n"
           "  --seed S          synthetic seed (default 1)\n"
           "  --budget X        25%% (default), 0.25 or an entry count\n"
           "  --repeats R       runs per policy (default 5)\n"
           "  --device D        cpu (default) or cuda\n"
           "  -h, --help        this help\n");
}

/* CPU seconds of this process: on a shared machine a fairer clock than
 * wall time for single-threaded work. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median wall and CPU seconds of `repeats` compressions of fresh copies. */
static ckv_status time_policy(const ckv_policy *p, const ckv_cache *src, int32_t budget,
                              const ckv_qwindow *qw, int repeats, double *wall, double *cpu,
                              ckv_error *err)
{
    double tw[repeats], tc[repeats];
    for (int r = 0; r < repeats; r++) {
        ckv_cache c;
        ckv_status st = ckv_cache_fork(&c, src, src->capacity, err);
        if (st)
            return st;
        double w0 = ckv_now(), c0 = cpu_now();
        st = ckv_policy_compress(p, &c, budget, qw, NULL, err);
        tc[r] = cpu_now() - c0;
        tw[r] = ckv_now() - w0;
        ckv_cache_free(&c);
        if (st)
            return st;
    }
    *wall = bench_median(tw, repeats);
    *cpu = bench_median(tc, repeats);
    return CKV_OK;
}

#if CKV_HAVE_CUDA
/* Median wall seconds of `repeats` GPU compressions of fresh uploads. */
static ckv_status time_policy_gpu(const ckv_policy *p, const ckv_cache *src, int32_t budget,
                                  const ckv_qwindow *qw, int repeats, double *wall,
                                  ckv_error *err)
{
    if (!ckv_gpu_policy_supported(p))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "policy %s has no GPU kernels", p->ops->name);
    ckv_gpu_cache *g;
    ckv_status st = ckv_gpu_cache_create_shape(&g, src->n_layer, src->n_head_kv, src->head_dim,
                                               src->capacity, src->score != NULL, err);
    if (st)
        return st;
    double tw[repeats];
    for (int r = -1; r < repeats && !st; r++) {
        if ((st = ckv_gpu_cache_upload(g, src, err)))
            break;
        double w0 = ckv_now();
        st = ckv_gpu_policy_compress(g, p, budget, qw, NULL, NULL, err);
        if (r >= 0)
            tw[r] = ckv_now() - w0;
    }
    ckv_gpu_cache_free(g);
    if (!st)
        *wall = bench_median(tw, repeats);
    return st;
}
#endif

static int bench_compress(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"synthetic", no_argument, 0, 'S'},     {"tokens", required_argument, 0, 'n'},
        {"layers", required_argument, 0, 'L'},  {"kv-heads", required_argument, 0, 'H'},
        {"head-dim", required_argument, 0, 'D'}, {"seed", required_argument, 0, 's'},
        {"budget", required_argument, 0, 'b'},  {"repeats", required_argument, 0, 'r'},
        {"device", required_argument, 0, 'd'},  {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    bool gpu = false;
    bool synthetic = false;
    long long tokens = 0, layers = 30, heads = 3, dim = 64, seed = 1, repeats = 5;
    const char *budget_s = "25%";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'S': synthetic = true; break;
        case 'n': ok = cli_int("bench", "--tokens", optarg, 2, 1 << 24, &tokens); break;
        case 'L': ok = cli_int("bench", "--layers", optarg, 1, 4096, &layers); break;
        case 'H': ok = cli_int("bench", "--kv-heads", optarg, 1, 4096, &heads); break;
        case 'D': ok = cli_int("bench", "--head-dim", optarg, 1, 65536, &dim); break;
        case 's': ok = cli_int("bench", "--seed", optarg, 0, INT64_MAX, &seed); break;
        case 'b': budget_s = optarg; break;
        case 'r': ok = cli_int("bench", "--repeats", optarg, 1, 1000, &repeats); break;
        case 'd':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return cli_usage_error("bench", "--device '%s': expected cpu or cuda", optarg);
            gpu = !strcmp(optarg, "cuda");
            break;
        case 'h': help(stdout); return CLI_OK;
        default: return cli_usage_error("bench", "invalid option");
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (synthetic == (optind < argc))
        return cli_usage_error("bench", "give either a dump file or --synthetic");
    if (synthetic && !tokens)
        return cli_usage_error("bench", "--synthetic needs --tokens N");
    if (optind < argc - 1)
        return cli_usage_error("bench", "unexpected argument '%s'", argv[optind + 1]);
    ckv_error err = {0};
#if CKV_HAVE_CUDA
    int32_t n_dev;
    if (gpu && ckv_cuda_device_count(&n_dev, &err))
        return cli_fail("bench", &err);
#else
    if (gpu) {
        fprintf(stderr, "ckv bench: built without CUDA (configure with -Dcuda=enabled)\n");
        return CLI_FAIL;
    }
#endif
    ckv_budget budget;
    if (ckv_budget_parse(budget_s, &budget, &err))
        return cli_usage_error("bench", "%s", err.msg);
    ckv_kvdump d = {0};
    if (synthetic) {
        if (ckv_synthetic_kv(&d.cache, &d.q_window, (int32_t)layers, (int32_t)heads,
                             (int32_t)heads * 3, (int32_t)dim, (int32_t)tokens,
                             tokens < 32 ? (int32_t)tokens : 32, (uint64_t)seed, &err))
            return cli_fail("bench", &err);
        d.n_head = (int32_t)heads * 3;
        d.w = tokens < 32 ? (int32_t)tokens : 32;
        d.prompt_tokens = tokens;
    } else if (ckv_kvfile_read(argv[optind], &d, &err)) {
        return cli_fail("bench", &err);
    }
    ckv_qwindow qw = {d.q_window, d.n_head, d.w};
    const char *const *names = ckv_policy_names();
    enum { MAXP = 16 };
    double wall[MAXP], secs[MAXP], csm = 0;
    int n = 0, rc = CLI_OK;
    printf("cache: %d layers x %d KV heads x %d tokens x head_dim %d (%s); budget %s = %lld; "
           "median of %lld\n",
           d.cache.n_layer, d.cache.n_head_kv, d.cache.capacity, d.cache.head_dim,
           synthetic ? "synthetic" : argv[optind], budget_s,
           (long long)ckv_budget_entries(&budget, d.prompt_tokens), repeats);
    for (; names[n] && n < MAXP; n++) {
        ckv_policy p;
        int64_t B;
        bool skip;
        char reason[256];
        secs[n] = -1;
        if (ckv_policy_init(&p, names[n], &err) ||
            ckv_budget_check(&p, &budget, d.prompt_tokens, &B, &skip, reason, sizeof reason,
                             &err)) {
            fprintf(stderr, "ckv bench: %s: %s\n", names[n], err.msg);
            continue;
        }
        if (skip) {
            fprintf(stderr, "ckv bench: %s skipped: %s\n", names[n], reason);
            continue;
        }
        if ((!qw.q && (ckv_policy_needs(&p) & CKV_NEEDS_Q_WINDOW)) ||
            (!d.cache.score && (ckv_policy_needs(&p) & CKV_NEEDS_SCORE))) {
            fprintf(stderr, "ckv bench: %s skipped: the dump lacks its statistics\n", names[n]);
            continue;
        }
        ckv_status st;
#if CKV_HAVE_CUDA
        if (gpu) {
            st = time_policy_gpu(&p, &d.cache, (int32_t)B, &qw, (int)repeats, &wall[n], &err);
            secs[n] = wall[n];
        } else
#endif
            st = time_policy(&p, &d.cache, (int32_t)B, &qw, (int)repeats, &wall[n], &secs[n],
                             &err);
        if (st) {
            rc = cli_fail("bench", &err);
            break;
        }
        if (!strcmp(names[n], "centroid"))
            csm = secs[n];
    }
    if (!rc) {
        printf("%-10s %12s %12s %10s\n", "policy", gpu ? "GPU ms" : "CPU ms", "wall ms",
               gpu ? "vs CSM" : "CPU vs CSM");
        for (int i = 0; i < n; i++)
            if (secs[i] >= 0)
                printf("%-10s %12.3f %12.3f %10.2f\n", names[i], secs[i] * 1e3, wall[i] * 1e3,
                       csm > 0 ? secs[i] / csm : 0.0);
    }
    ckv_kvdump_free(&d);
    return rc;
}

static void usage(FILE *fp)
{
    fprintf(fp, "usage: ckv bench BENCHMARK [options]\n\n"
                "Benchmarks:\n"
                "  compress   every policy's compression time of one cache (CPU or GPU)\n"
                "  attention  the attention kernel and GEMMs vs copy and matrix ceilings (GPU)\n"
                "  decode     decode steps of a model shape with random weights (GPU)\n"
                "  generate   prefill and greedy decode end to end beside transformers\n"
                "             `generate` on the same prompts (GPU)\n"
                "  throughput sequences and tokens/s under a KV memory cap, full vs each\n"
                "             policy and budget, compression included (GPU)\n\n"
                "Run 'ckv bench BENCHMARK --help' for its options.\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "compress"))
        return bench_compress(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention"))
        return bench_attention(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode"))
        return bench_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "generate"))
        return bench_generate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "throughput"))
        return bench_throughput(argc - 1, argv + 1);
    return cli_usage_error("bench",
                           "unknown benchmark '%s' (known: compress, attention, decode, generate, throughput)",
                           argv[1]);
}

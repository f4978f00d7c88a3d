// config.hpp — the run's configuration: input deck + command line, validated, printable.
//
// One Boost.Program_options description serves the deck (INI sections [data] [model]
// [train] [comm] [output]) and the command line (--train.epochs=3); the command line wins.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ringtrain {

// The most train.threads a rank may ask for: a cpu_set_t (CPU_SETSIZE) describes at most 1024
// CPUs, so more threads than this can never each have a core of their own.
constexpr int kMaxThreads = 1024;
// The longest comm.stall_timeout_s: 1e6 s (11.6 days) outlasts any job's wall-clock limit and
// stays far below the 9.2e9 s at which the stall clock's int64 nanoseconds overflow.
constexpr double kMaxStallTimeoutS = 1e6;
// The largest train.cudnn_workspace_mib: 1 TiB, beyond any GPU's memory.
constexpr int kMaxCudnnWorkspaceMib = 1 << 20;
// The loss scale's range (train.loss_scale, train.loss_scale_init): below 1 a scale cannot cure
// an overflow (the gradients are not finite unscaled); 2^24 is far above any useful fp16 scale
// and keeps world size x accumulation x scale an exact float divisor.
constexpr double kMinLossScale = 1.0;
constexpr double kMaxLossScale = 16777216.0;  // 2^24

struct DataConfig {
  std::string dir;  // shard directory (rt-shard / rt-fibergen output)
  std::string train_split = "train";
  std::string eval_split = "val";   // evaluated every epoch; "" to skip
  std::string test_split = "test";  // evaluated once at the end; "" to skip
  std::string remainder = "drop";   // drop | pad
  bool shuffle = true;
  std::string augment = "false";  // false | true (crop and flip) | crop | dihedral
  int augment_pad = 4;            // the crop's padding: offsets -pad..pad in each direction
  std::string tta = "none";       // evaluation: none | flip | dihedral (test-time augmentation)
  int prefetch_batches = 4;
  int64_t max_train_samples = 0;  // 0: the whole split (weak scaling decks set a per-rank count)
  int64_t samples_per_rank = 0;   // weak scaling: use world_size * this many train samples
};

struct ModelConfig {
  std::string name;
  std::string heads = "class";  // class | inspect (fiber: + defects, pass/fail, zones)
  // inspect: weights of the extra heads' BCE losses beside the class cross-entropy. Each BCE is
  // a mean over its outputs, on the class loss's scale (ln 2 against ln 5 at the start), so 1
  // lets no head dominate the shared features.
  double loss_weight_defects = 1.0;
  double loss_weight_pass = 1.0;
  double loss_weight_zones = 1.0;
  // inspect: the pass threshold is chosen on the eval split so that at most this fraction of
  // truly failing images is called passing (the false-accept rate).
  double false_accept_target = 0.01;
};

struct TrainConfig {
  std::string backend = "cpu";     // cpu | cuda | ref
  bool share_gpus = false;         // cuda: ranks of a node may share GPUs when they outnumber them
  std::string precision = "fp32";  // fp32 | bf16 | fp16 | tf32 (the last two: cuda only)
  bool deterministic = false;      // cuda: only convolution algorithms cuDNN calls deterministic
  int cudnn_workspace_mib = 256;   // cuda: most workspace a convolution algorithm may use
  std::string conv_weight_grad = "onednn";  // cpu: onednn | gemm | measure (backend.hpp)
  std::string conv_algorithm = "auto";      // cpu: auto | direct | winograd | measure (backend.hpp)
  // measure's choices given beforehand, "name=gemm|onednn[+forward][+winograd|direct],...":
  // those convolutions are not timed.
  std::string conv_weight_grad_choices;
  int threads = 0;                 // 0: this rank's share of the cores; at most kMaxThreads
  int epochs = 1;
  int batch_per_rank = 0;  // exactly one of batch_per_rank and global_batch
  int global_batch = 0;
  int64_t max_steps = 0;     // 0: no limit (benchmarks set it); counts optimizer steps
  int accumulate_steps = 1;  // micro-batches per optimizer step (gradient accumulation)
  double lr = 0.1;
  std::string optimizer = "sgd";  // sgd | lars | lamb | adamw (nn/optimizer.hpp)
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-4;
  bool decay_bn_and_bias = false;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;  // lamb, adamw
  double trust_coef = 1e-3;                             // lars
  double clip_norm = 0;        // clip the reduced gradient's global norm to this (0: off)
  double label_smoothing = 0;  // targets (1 - s) one-hot + s / classes (and s/2 for BCE heads)
  double ema_decay = 0;        // an exponential moving average of the weights (0: off)
  std::string schedule = "cosine";  // cosine | step | constant
  double warmup_epochs = 0;
  std::vector<int> step_epochs;  // "30,60,80" for schedule = step
  double step_gamma = 0.1;
  bool scale_lr = false;  // linear scaling rule: lr * global_batch / base_batch
  int base_batch = 256;
  uint64_t seed = 1;
  int log_interval = 50;              // steps between progress lines
  int64_t checkpoint_every = 0;       // steps; 0: only on SIGTERM / SIGUSR1
  std::string on_nonfinite = "stop";  // stop | skip: a step whose loss or gradients are NaN/Inf
  // dynamic | none | a static scale (the number as text); "auto" in a deck becomes
  // default_loss_scale(precision) when parsed.
  std::string loss_scale = "auto";
  double loss_scale_init = 65536;             // dynamic: the first scale, 2^16
  int64_t loss_scale_growth_interval = 2000;  // dynamic: clean steps before the scale doubles
  int straggler_rank = -1;                    // this rank sleeps straggler_ms in every data phase
  double straggler_ms = 0;                    // (load-imbalance studies; -1: no straggler)
};

struct CommConfig {
  std::string algorithm = "auto";  // ring | rhd | auto | mpi | hierarchical | nccl
  // auto (the default): chosen from timed steps (comm/fusion/autotune.hpp); a value fixes the
  // knob and turns its search off. Read them through fixed_fusion_mib() and fixed_overlap().
  std::string fusion_mib = "auto";  // auto | MiB > 0
  double first_bucket_mib = 1;
  double stall_timeout_s = 60;
  std::string overlap = "auto";  // auto | true | false
  bool local_gate = true;
  bool shared_memory = true;
  std::string wire = "fp32";  // fp32 | bf16 | fp16
  int chunk_kib = 0;          // 0: by message size (comm::allreduce::chunk_bytes_for)
  int ranks_per_node = 0;     // 0: the real nodes
  bool sync_bn = false;
  // Steps between the ranks' weight checks (train/weight_check.hpp); 0: only before checkpoints.
  int64_t verify_every = 100;
  std::string on_divergence = "stop";  // stop | repair
};

struct OutputConfig {
  std::string dir = "output";
  std::string name;  // results file <dir>/<name>.h5; default: the deck's stem; no '/'
  bool timeline = false;
  std::string checkpoint_dir;  // holds <name>.ckpt.h5; default: dir
  std::string baseline;        // results file of the reference run, for scaling efficiency
};

struct Config {
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  CommConfig comm;
  OutputConfig output;

  std::string deck_path;  // "" when run from the command line alone
  bool resume = false;
  std::string effective_deck;  // the deck as run: every key, in INI form

  std::string results_path() const { return output.dir + "/" + output.name + ".h5"; }
  std::string checkpoint_path() const;
};

// What the command line asked for.
struct CommandLine {
  Config config;
  bool help = false;
  bool print_deck = false;
  std::string help_text;
};

// Parses argv (and the deck it names). Bad input throws InputError with one line naming the
// deck file (and line), the key and the value.
CommandLine parse_command_line(int argc, const char* const argv[]);

// train.loss_scale = auto: dynamic for train.precision = fp16 (its small gradients flush to zero
// unscaled), none for fp32 and bf16 (bf16 has fp32's exponent range).
std::string default_loss_scale(const std::string& precision);

// comm.fusion_mib and comm.overlap as fixed values; nullopt: auto (searched). Valid decks only.
std::optional<double> fixed_fusion_mib(const CommConfig& comm);
std::optional<bool> fixed_overlap(const CommConfig& comm);

// The options description as help text: every key with its default and unit.
std::string help_text();
// The same table as Markdown: docs/DECK.md is this text (ringtrain --help-markdown), and
// tests/e2e/deck_reference.sh fails when the committed file differs from it.
std::string help_markdown();

// Checks what depends on the world size (global batch divisible by ranks, ...).
void validate_for_world(const Config& config, int world_size);

// Touches the filesystem before any training: creates output.checkpoint_dir (mkdir -p) and
// checks it is writable, and checks output.baseline is a readable file. Throws InputError naming
// the key and the path.
void prepare_output_paths(const Config& config);

// The keys each rank may set for itself: they change how a rank runs (its threads, its
// prefetch depth) or name paths only rank 0 uses (output.dir, output.baseline), never what the
// ranks compute together. docs/GUIDE.md, "One job, one configuration", lists them.
const std::vector<std::string>& per_rank_keys();

// What every rank of a job must share: every key of the effective deck (after defaults, deck
// and command line) but per_rank_keys(), and --resume (the checkpoint every rank reads, or
// false); one "key = value" line each, in --print-deck's order.
std::string agreed_config_text(const Config& config);

// The warning when train.threads asks for more threads than the `cores` this rank has
// (`why`: how they were counted); "" when they fit or threads are chosen automatically.
std::string threads_warning(const Config& config, int cores, const std::string& why);

}  // namespace ringtrain

// config.cpp — one option table drives the deck parser, the CLI, --help and --print-deck.
#include "ringtrain/config/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <variant>

#include "ringtrain/core/error.hpp"

namespace po = boost::program_options;

namespace ringtrain {
namespace {

using Field = std::variant<int*, int64_t*, double*, bool*, std::string*>;

struct Option {
  const char* key;
  Field field;
  const char* help;
  std::vector<std::string> choices;  // empty: any value of the type
  bool required = false;
};

// The whole vocabulary of a deck, in the order --help and --print-deck show it.
std::vector<Option> option_table(Config& c, std::string& step_epochs, int64_t& seed) {
  // A table read row by row: one option per entry, not reflowed.
  // clang-format off
  return {
      {"data.dir", &c.data.dir, "directory of HDF5 shards (rt-shard / rt-fibergen output)", {}, true},
      {"data.train_split", &c.data.train_split, "split trained on", {}},
      {"data.eval_split", &c.data.eval_split, "split evaluated after every epoch (\"\" = none)", {}},
      {"data.test_split", &c.data.test_split, "split evaluated once at the end (\"\" = none)", {}},
      {"data.remainder", &c.data.remainder,
       "samples that do not fill the last global batch: drop, or pad by wrapping", {"drop", "pad"}},
      {"data.shuffle", &c.data.shuffle, "reshuffle the train split every epoch", {}},
      {"data.augment", &c.data.augment,
       "training augmentation: false; true (random crop with data.augment_pad px padding and "
       "horizontal flip); crop (the crop alone: images with a handedness); dihedral (one of the 8 "
       "rotations by 90 degrees and mirrorings, square images: fiber end faces)",
       {"false", "true", "crop", "dihedral"}},
      {"data.augment_pad", &c.data.augment_pad,
       "the random crop's padding in pixels (offsets -pad..pad in each direction), 0 to 16", {}},
      {"data.tta", &c.data.tta,
       "test-time augmentation of evaluation: none; flip (the image and its mirror image); "
       "dihedral (the 8 rotations and mirrorings); class and head probabilities averaged",
       {"none", "flip", "dihedral"}},
      {"data.prefetch_batches", &c.data.prefetch_batches, "batches the loader thread reads ahead", {}},
      {"data.max_train_samples", &c.data.max_train_samples, "use only the first N train samples (0 = all)", {}},
      {"data.samples_per_rank", &c.data.samples_per_rank,
       "weak scaling: train on world_size * N samples (0 = off)", {}},
      // The zoo's names (nn::model_names(); test_config.cpp holds them equal): a name checked
      // here is refused with its deck line before any rank opens data.
      {"model.name", &c.model.name, "model from the zoo", {"cnn_small", "resnet18_cifar", "fibernet"}, true},
      {"model.heads", &c.model.heads,
       "class: the primary class; inspect: also defects (multi-label), pass/fail and zones A-D "
       "(fiber data)", {"class", "inspect"}},
      {"model.loss_weight_defects", &c.model.loss_weight_defects,
       "heads = inspect: weight of the defect head's BCE beside the class cross-entropy", {}},
      {"model.loss_weight_pass", &c.model.loss_weight_pass,
       "heads = inspect: weight of the pass/fail head's BCE", {}},
      {"model.loss_weight_zones", &c.model.loss_weight_zones,
       "heads = inspect: weight of the zone heads' BCE", {}},
      {"model.false_accept_target", &c.model.false_accept_target,
       "heads = inspect: the pass threshold is chosen on the eval split for at most this fraction "
       "of failing images called passing, in [0, 1)", {}},
      {"train.backend", &c.train.backend, "device library: cpu (oneDNN), cuda (cuDNN), ref (plain loops)",
       {"cpu", "cuda", "ref"}},
      {"train.share_gpus", &c.train.share_gpus,
       "cuda: let the ranks of a node share its GPUs when they outnumber them (false: an error)", {}},
      {"train.precision", &c.train.precision,
       "activations and convolutions: fp32; bf16 (cpu on AVX512-BF16 or AMX, cuda); fp16 or "
       "tf32 (cuda: tensor cores); weights, gradients, optimizer and reduction stay fp32",
       {"fp32", "bf16", "fp16", "tf32"}},
      {"train.deterministic", &c.train.deterministic,
       "cuda: only convolution algorithms cuDNN calls deterministic (bitwise repeatable runs)", {}},
      {"train.conv_weight_grad", &c.train.conv_weight_grad,
       "cpu: a convolution's weight gradient from oneDNN's kernel (onednn), as one matmul over "
       "the unfolded input (gemm), or per convolution the faster of the two, timed at its "
       "first backward pass (measure; which also times the input gradient of a stride-1 "
       "same-size convolution by oneDNN's backward-data kernel against its forward kernel over "
       "dy with the filter flipped, and of a 3x3 stride-2 one against four forward "
       "convolutions, one per parity of the input pixel, and keeps the faster)",
       {"onednn", "gemm", "measure"}},
      {"train.conv_algorithm", &c.train.conv_algorithm,
       "cpu: the algorithm of 3x3 stride-1 fp32 convolutions: per convolution Winograd where "
       "it pays by a fixed rule (auto: 32 channels or more on the narrower side and enough 4x4 "
       "output tiles in the rank's batch; the same choice in every run), oneDNN's direct "
       "kernels, its Winograd ones (F(4x4, 3x3): 2.25 times fewer multiplications, rounding of "
       "about 1e-6 of the largest value against 1e-7) for the forward, input-gradient and "
       "weight-gradient passes where oneDNN has them, or per convolution the faster of the two, "
       "timed at its first forward pass (measure); every other convolution, and bf16, stays "
       "direct",
       {"auto", "direct", "winograd", "measure"}},
      {"train.conv_weight_grad_choices", &c.train.conv_weight_grad_choices,
       "cpu, with train.conv_weight_grad or train.conv_algorithm = measure: measure's choices "
       "made beforehand, name=gemm|onednn[+forward][+winograd|direct],... (+forward: the input "
       "gradient by the forward kernel; +winograd or +direct: the algorithm, with "
       "train.conv_algorithm = measure; the checkpoint attribute conv_weight_grad_choices of a "
       "run, whose ranks all take rank 0's); the convolutions named are not timed, so runs that "
       "name them all repeat bitwise",
       {}},
      {"train.cudnn_workspace_mib", &c.train.cudnn_workspace_mib,
       "cuda: most scratch memory a cuDNN convolution algorithm may use, MiB", {}},
      {"train.threads", &c.train.threads,
       "threads per rank (0 = this rank's share of its cores, or OMP_NUM_THREADS, capped at "
       "`OMP_THREAD_LIMIT`; at most 1024, and a count set here above `OMP_THREAD_LIMIT` is "
       "refused)",
       {}},
      {"train.epochs", &c.train.epochs, "epochs to train", {}},
      {"train.batch_per_rank", &c.train.batch_per_rank,
       "images per rank per step (weak scaling); or set train.global_batch", {}},
      {"train.global_batch", &c.train.global_batch,
       "images per step over all ranks (strong scaling); divisible by the world size", {}},
      {"train.max_steps", &c.train.max_steps,
       "stop after this many optimizer steps (0 = no limit)", {}},
      {"train.accumulate_steps", &c.train.accumulate_steps,
       "micro-batches of batch_per_rank per optimizer step (gradient accumulation; the "
       "effective global batch is accumulate_steps x batch_per_rank x world size)",
       {}},
      {"train.lr", &c.train.lr, "base learning rate", {}},
      {"train.optimizer", &c.train.optimizer,
       "update rule: sgd (momentum, nesterov), lars (layer-wise trust ratio, You et al. 2017), "
       "lamb (Adam moments with a trust ratio, You et al. 2019), adamw (decoupled weight decay)",
       {"sgd", "lars", "lamb", "adamw"}},
      {"train.momentum", &c.train.momentum, "SGD and LARS momentum", {}},
      {"train.nesterov", &c.train.nesterov, "Nesterov momentum (sgd)", {}},
      {"train.weight_decay", &c.train.weight_decay,
       "weight decay (sgd, lars: L2 in the gradient; lamb, adamw: decoupled)", {}},
      {"train.decay_bn_and_bias", &c.train.decay_bn_and_bias,
       "apply weight decay (and LARS/LAMB's trust ratio) to batch-norm parameters and biases too",
       {}},
      {"train.beta1", &c.train.beta1, "lamb, adamw: decay of the first moment", {}},
      {"train.beta2", &c.train.beta2, "lamb, adamw: decay of the second moment", {}},
      {"train.adam_eps", &c.train.adam_eps, "lamb, adamw: added to the second moment's root", {}},
      {"train.trust_coef", &c.train.trust_coef,
       "lars: eta, the trust coefficient of the layer-wise learning rate", {}},
      {"train.clip_norm", &c.train.clip_norm,
       "clip the reduced gradient to this global L2 norm before the update (0 = off)", {}},
      {"train.ema_decay", &c.train.ema_decay,
       "keep an exponential moving average of the weights and BN statistics with this decay "
       "(warmed up as min(d, (1+t)/(10+t))), evaluated each epoch beside the weights and saved in "
       "the model file, where predict and rt-export use it (0 = off)",
       {}},
      {"train.label_smoothing", &c.train.label_smoothing,
       "class targets (1 - s) one-hot + s / classes; inspection heads' targets t (1 - s) + s / 2",
       {}},
      {"train.schedule", &c.train.schedule, "learning-rate decay after warm-up",
       {"cosine", "step", "constant"}},
      {"train.warmup_epochs", &c.train.warmup_epochs, "linear warm-up length, epochs", {}},
      {"train.step_epochs", &step_epochs, "schedule = step: epochs where lr *= step_gamma, e.g. 30,60", {}},
      {"train.step_gamma", &c.train.step_gamma, "schedule = step: decay factor", {}},
      {"train.scale_lr", &c.train.scale_lr, "linear scaling rule: lr * global_batch / base_batch", {}},
      {"train.base_batch", &c.train.base_batch, "batch size the base lr was tuned for", {}},
      {"train.seed", &seed, "seed of weights, shuffling and augmentation", {}},
      {"train.log_interval", &c.train.log_interval, "steps between progress lines", {}},
      {"train.checkpoint_every", &c.train.checkpoint_every,
       "steps between checkpoints (0 = only on SIGTERM/SIGUSR1)", {}},
      {"train.on_nonfinite", &c.train.on_nonfinite,
       "a step whose loss or gradients are NaN or Inf: stop the run, or skip that step's update",
       {"stop", "skip"}},
      {"train.loss_scale", &c.train.loss_scale,
       "loss scaling: dynamic (halve on overflow and skip the step on every rank, double after "
       "loss_scale_growth_interval clean steps), none, or a static scale from 1 to 16777216; auto = "
       "dynamic for precision fp16, else none", {}},
      {"train.loss_scale_init", &c.train.loss_scale_init,
       "loss_scale = dynamic: the first scale, from 1 to 16777216", {}},
      {"train.loss_scale_growth_interval", &c.train.loss_scale_growth_interval,
       "loss_scale = dynamic: clean steps in a row before the scale doubles", {}},
      {"train.straggler_rank", &c.train.straggler_rank,
       "make this rank a straggler for load-imbalance studies (-1 = none)", {}},
      {"train.straggler_ms", &c.train.straggler_ms,
       "milliseconds the straggler sleeps in every step's data phase", {}},
      {"comm.algorithm", &c.comm.algorithm, "gradient allreduce",
       {"ring", "rhd", "auto", "mpi", "hierarchical", "nccl"}},
      {"comm.fusion_mib", &c.comm.fusion_mib,
       "fusion buffer (bucket) size cap, MiB, or auto: timed in the first steps (0.5, 4, 16, 64)", {}},
      {"comm.first_bucket_mib", &c.comm.first_bucket_mib,
       "size cap of the first bucket, MiB, so reduction starts early", {}},
      {"comm.stall_timeout_s", &c.comm.stall_timeout_s,
       "abort when a bucket waits this long for a rank, seconds (at most 1e6)", {}},
      {"comm.overlap", &c.comm.overlap,
       "reduce buckets while backward runs (false: after it; auto: timed in the first steps)",
       {"auto", "true", "false"}},
      {"comm.local_gate", &c.comm.local_gate,
       "sleep until the node's ranks reach a bucket, not poll in MPI (false: poll)", {}},
      {"comm.shared_memory", &c.comm.shared_memory,
       "ring on one node: messages through shared memory, waits asleep (false: MPI, polling)", {}},
      {"comm.wire", &c.comm.wire, "ring allreduce wire format (accumulation stays fp32)",
       {"fp32", "bf16", "fp16"}},
      {"comm.chunk_kib", &c.comm.chunk_kib,
       "ring/rhd pipeline chunk size, KiB (0 = by message: 256 KiB from 16 MiB up, else 1 MiB)", {}},
      {"comm.ranks_per_node", &c.comm.ranks_per_node,
       "hierarchical: declare nodes of this many consecutive ranks (0 = the real nodes)", {}},
      {"comm.sync_bn", &c.comm.sync_bn, "batch-norm statistics over all ranks (false: per rank)", {}},
      {"comm.verify_every", &c.comm.verify_every,
       "steps between checks that every rank holds the same weights and optimizer state (a digest "
       "compared across ranks; always before a checkpoint; 0 = only before checkpoints)", {}},
      {"comm.on_divergence", &c.comm.on_divergence,
       "ranks found holding different weights: stop every rank naming the ranks and the first "
       "tensor, or repair them from the majority's copy (no majority, e.g. 2 ranks: stop)",
       {"stop", "repair"}},
      {"output.dir", &c.output.dir, "directory for results, timelines, checkpoints", {}},
      {"output.name", &c.output.name, "results file name without .h5 (default: the deck's name)", {}},
      {"output.timeline", &c.output.timeline, "write a Chrome-trace timeline <dir>/<name>.trace.json", {}},
      {"output.checkpoint_dir", &c.output.checkpoint_dir,
       "directory of the checkpoint <name>.ckpt.h5, created at start (default: output.dir)", {}},
      {"output.baseline", &c.output.baseline,
       "results file of the reference run, for scaling efficiency", {}},
  };
  // clang-format on
}

const char* type_name(const Field& f) {
  struct {
    const char* operator()(int*) { return "an integer"; }
    const char* operator()(int64_t*) { return "an integer"; }
    const char* operator()(double*) { return "a number"; }
    const char* operator()(bool*) { return "true or false"; }
    const char* operator()(std::string*) { return "a string"; }
  } visitor;
  return std::visit(visitor, f);
}

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

std::string field_text(const Field& f) {
  struct {
    std::string operator()(int* p) { return std::to_string(*p); }
    std::string operator()(int64_t* p) { return std::to_string(*p); }
    std::string operator()(double* p) { return format_number(*p); }
    std::string operator()(bool* p) { return *p ? "true" : "false"; }
    std::string operator()(std::string* p) { return *p; }
  } visitor;
  return std::visit(visitor, f);
}

po::options_description describe(const std::vector<Option>& table) {
  po::options_description desc("Deck keys (also --section.key=value on the command line)");
  for (const auto& opt : table) {
    std::string help = opt.help;
    if (!opt.choices.empty()) {
      help += " [";
      for (size_t i = 0; i < opt.choices.size(); ++i) help += (i ? "|" : "") + opt.choices[i];
      help += "]";
    }
    if (opt.required) help += " (required)";
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          auto* value = po::value<T>(p);
          if (!opt.required) value->default_value(*p, field_text(opt.field));
          desc.add_options()(opt.key, value, help.c_str());
        },
        opt.field);
  }
  return desc;
}

po::options_description cli_only() {
  po::options_description desc("Command line");
  desc.add_options()("help,h", "list every option with its default and unit, then exit")(
      "help-markdown", "the same list as Markdown (docs/DECK.md), then exit")(
      "deck", po::value<std::string>(), "input deck (INI) to read; the command line overrides it")(
      "print-deck", "print the effective deck and exit")("resume",
                                                         "continue from the run's checkpoint");
  return desc;
}

// A value as an error message may show it: bytes outside printable ASCII as \xNN (a deck may
// hold binary junk that would garble the terminal or cut the line at a NUL), long ones cut.
std::string shown(const std::string& value) {
  constexpr size_t kMaxShown = 64;
  std::string out;
  for (size_t i = 0; i < value.size() && i < kMaxShown; ++i) {
    const auto byte = static_cast<unsigned char>(value[i]);
    if (byte >= 0x20 && byte < 0x7f) {
      out += char(byte);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    }
  }
  if (value.size() > kMaxShown) out += str("... (", value.size(), " bytes)");
  return out;
}

// Maps "section.key" to its line in the deck, so errors can point at it. A key set twice is
// an error here: Boost would report it as a bad value.
std::map<std::string, int> deck_lines(const std::string& path) {
  std::map<std::string, int> lines;
  std::ifstream in(path);
  std::string line, section;
  for (int n = 1; std::getline(in, line); ++n) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#' || line[start] == ';') continue;
    if (line[start] == '[') {
      section = line.substr(start + 1, line.find(']') - start - 1);
      continue;
    }
    if (line.find('=') == std::string::npos) continue;  // not a key; Boost says why
    std::string key = line.substr(start, line.find('=') - start);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (!section.empty()) key = section + "." + key;
    auto [first, inserted] = lines.emplace(key, n);
    if (!inserted)
      throw InputError(str(path, ":", n, ": duplicate key ", shown(key), " (first at line ",
                           first->second, ")"));
  }
  return lines;
}

// Where a key's value came from, for messages: "inputs/a.deck:12" or "command line".
struct Source {
  std::string deck;
  std::map<std::string, int> lines;
  std::set<std::string> from_cli;

  std::string of(const std::string& key) const {
    if (from_cli.count(key) || deck.empty()) return "command line";
    auto it = lines.find(key);
    return it == lines.end() ? deck : deck + ":" + std::to_string(it->second);
  }
};

std::string value_of(const po::parsed_options& parsed, const std::string& key) {
  for (const auto& o : parsed.options)
    if (o.string_key == key && !o.value.empty()) return o.value.front();
  return "";
}

// Edits (insertions, deletions, substitutions) from a to b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "did you mean train.epochs? " for a key one typo away from a real one, in its section or in
// another (epochs under [comm]), the start of exactly one key (train.batch: Boost once took it
// for train.batch_per_rank) or a key with more after it (data.directory); the command line's own
// flags with their dashes ("--print-deck"); "" when nothing is that close.
std::string did_you_mean(const std::string& key, const std::vector<Option>& table) {
  std::vector<std::string> candidates = {"deck", "print-deck", "resume", "help", "help-markdown"};
  for (const auto& opt : table) candidates.push_back(opt.key);
  const auto name_of = [](const std::string& k) { return k.substr(k.find('.') + 1); };
  std::string best, prefixed;
  size_t best_distance = std::numeric_limits<size_t>::max(), prefixes = 0;
  for (const auto& candidate : candidates) {
    if (candidate.rfind(key, 0) == 0 || key.rfind(candidate, 0) == 0) {
      ++prefixes;
      prefixed = candidate;
    }
    // Another section costs one edit more than the same name in the right one.
    const size_t distance = std::min(edit_distance(key, candidate),
                                     edit_distance(name_of(key), name_of(candidate)) + 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  const size_t allowed = std::max<size_t>(2, name_of(key).size() / 4);
  const std::string found = prefixes == 1 ? prefixed : best_distance <= allowed ? best : "";
  if (found.empty()) return "";
  return str("did you mean ", found.find('.') == std::string::npos ? "--" : "", found, "? ");
}

// Stores one source's options, turning Boost's errors into our one-line messages.
void store_checked(const po::parsed_options& parsed, po::variables_map& vm,
                   const po::options_description& desc, const std::vector<Option>& table,
                   const std::function<std::string(const std::string&)>& where) {
  std::set<std::string> seen;
  for (const auto& o : parsed.options) {
    if (o.position_key >= 0)  // a bare word: Boost's lookup of its empty key would throw
      throw InputError(str("command line: unexpected argument '", shown(o.value.front()),
                           "'; keys are given as --section.key=value, the deck as --deck FILE"));
    if (o.unregistered || !desc.find_nothrow(o.string_key, false))
      throw InputError(str(where(o.string_key), ": unknown key '", shown(o.string_key),
                           "' (value '", shown(o.value.empty() ? "" : o.value.front()), "'); ",
                           did_you_mean(o.string_key, table), "ringtrain --help lists every key"));
    if (!seen.insert(o.string_key).second)
      throw InputError(str(where(o.string_key), ": duplicate key ", o.string_key));
  }
  try {
    po::store(parsed, vm);
  } catch (const po::error_with_option_name& e) {
    std::string key = e.get_option_name();
    if (key.rfind("--", 0) == 0) key = key.substr(2);
    auto opt =
        std::find_if(table.begin(), table.end(), [&](const Option& o) { return key == o.key; });
    std::string expected = opt == table.end() ? e.what() : str("expected ", type_name(opt->field));
    throw InputError(str(where(key), ": bad value '", shown(value_of(parsed, key)), "' for ", key,
                         " (", expected, ")"));
  }
}

// A finite number, or NaN for anything else.
double parse_mib(const std::string& text) {
  const char* start = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(start, &end);
  if (end == start || *end != '\0' || errno != 0 || !std::isfinite(value))
    return std::numeric_limits<double>::quiet_NaN();
  return value;
}

// ", "-separated choices after `lead`, or "" for a key that takes any value of its type.
std::string choice_list(const Option& opt, const char* lead) {
  std::string list;
  for (const auto& ch : opt.choices) list += (list.empty() ? lead : ", ") + ch;
  return list;
}

// One train.conv_weight_grad_choices item: name=tokens, '+'-joined, in order: gemm or onednn,
// then forward (both optional together), then winograd or direct; at least one.
bool is_conv_choice(const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) return false;
  static const std::vector<std::vector<std::string>> kSlots{
      {"gemm", "onednn"}, {"forward"}, {"winograd", "direct"}};
  std::istringstream tokens(item.substr(eq + 1));
  size_t slot = 0;
  bool weights = false;
  for (std::string token; std::getline(tokens, token, '+');) {
    while (slot < kSlots.size() &&
           std::find(kSlots[slot].begin(), kSlots[slot].end(), token) == kSlots[slot].end())
      ++slot;
    if (slot == kSlots.size() || (slot == 1 && !weights)) return false;
    weights = weights || slot == 0;
    ++slot;
  }
  return item.back() != '+';
}

void check_choices_and_ranges(const std::vector<Option>& table, const Config& c,
                              const Source& src) {
  for (const auto& opt : table) {
    if (opt.choices.empty()) continue;
    const std::string& v = *std::get<std::string*>(opt.field);
    bool ok = false;
    for (const auto& ch : opt.choices) ok = ok || v == ch;
    if (!ok) {
      std::string list;
      for (const auto& ch : opt.choices) list += (list.empty() ? "" : ", ") + ch;
      throw InputError(str(src.of(opt.key), ": bad value '", shown(v), "' for ", opt.key,
                           " (one of: ", list, ")"));
    }
  }
  // nan and inf parse as numbers, and no key means either.
  for (const auto& opt : table)
    if (auto* number = std::get_if<double*>(&opt.field); number && !std::isfinite(**number))
      throw InputError(str(src.of(opt.key), ": bad value '", format_number(**number), "' for ",
                           opt.key, " (a finite number)"));
  auto require = [&](bool ok, const char* key, const std::string& value, const char* rule) {
    if (!ok)
      throw InputError(str(src.of(key), ": bad value '", value, "' for ", key, " (", rule, ")"));
  };
  const auto& model = c.model;
  require(model.loss_weight_defects >= 0, "model.loss_weight_defects",
          format_number(model.loss_weight_defects), "0 or more");
  require(model.loss_weight_pass >= 0, "model.loss_weight_pass",
          format_number(model.loss_weight_pass), "0 or more");
  require(model.loss_weight_zones >= 0, "model.loss_weight_zones",
          format_number(model.loss_weight_zones), "0 or more");
  require(model.false_accept_target >= 0 && model.false_accept_target < 1,
          "model.false_accept_target", format_number(model.false_accept_target), "in [0, 1)");
  const auto& t = c.train;
  require(t.epochs >= 1, "train.epochs", std::to_string(t.epochs), "at least 1");
  require(t.batch_per_rank >= 0, "train.batch_per_rank", std::to_string(t.batch_per_rank),
          "positive");
  require(t.global_batch >= 0, "train.global_batch", std::to_string(t.global_batch), "positive");
  require(t.max_steps >= 0, "train.max_steps", std::to_string(t.max_steps), "0 or more");
  require(t.accumulate_steps >= 1, "train.accumulate_steps", std::to_string(t.accumulate_steps),
          "at least 1");
  require(t.lr > 0 && std::isfinite(t.lr), "train.lr", format_number(t.lr), "a positive number");
  require(t.momentum >= 0 && t.momentum < 1, "train.momentum", format_number(t.momentum),
          "in [0, 1)");
  require(t.weight_decay >= 0, "train.weight_decay", format_number(t.weight_decay), "0 or more");
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", format_number(t.beta1), "in [0, 1)");
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", format_number(t.beta2), "in [0, 1)");
  require(t.adam_eps > 0, "train.adam_eps", format_number(t.adam_eps), "a positive number");
  require(t.trust_coef > 0, "train.trust_coef", format_number(t.trust_coef), "a positive number");
  require(t.clip_norm >= 0 && std::isfinite(t.clip_norm), "train.clip_norm",
          format_number(t.clip_norm), "0 (off) or a positive norm");
  require(t.ema_decay >= 0 && t.ema_decay < 1, "train.ema_decay", format_number(t.ema_decay),
          "in [0, 1) (0 = off)");
  require(t.label_smoothing >= 0 && t.label_smoothing < 1, "train.label_smoothing",
          format_number(t.label_smoothing), "in [0, 1)");
  require(t.warmup_epochs >= 0, "train.warmup_epochs", format_number(t.warmup_epochs), "0 or more");
  require(t.step_gamma > 0 && t.step_gamma <= 1, "train.step_gamma", format_number(t.step_gamma),
          "in (0, 1]");
  require(t.base_batch >= 1, "train.base_batch", std::to_string(t.base_batch), "at least 1");
  require(t.threads >= 0 && t.threads <= kMaxThreads, "train.threads", std::to_string(t.threads),
          "0 (this rank's share of its cores) to 1024");
  require(t.cudnn_workspace_mib >= 1 && t.cudnn_workspace_mib <= kMaxCudnnWorkspaceMib,
          "train.cudnn_workspace_mib", std::to_string(t.cudnn_workspace_mib), "1 to 1048576 MiB");
  // measure chooses by timing, which may choose otherwise in the next run.
  if (t.deterministic && t.conv_weight_grad == "measure")
    throw InputError(
        "train.conv_weight_grad = measure chooses by timing, so two runs may differ; with "
        "train.deterministic = true choose onednn or gemm");
  if (t.deterministic && t.conv_algorithm == "measure")
    throw InputError(
        "train.conv_algorithm = measure chooses by timing, so two runs may differ; with "
        "train.deterministic = true choose auto, direct or winograd");
  // measure's choices given beforehand: name=tokens items (Model::weight_grad_choices), and only
  // beside a measure.
  if (!t.conv_weight_grad_choices.empty()) {
    if (t.conv_weight_grad != "measure" && t.conv_algorithm != "measure")
      throw InputError(str(src.of("train.conv_weight_grad_choices"),
                           ": train.conv_weight_grad_choices gives measure's choices beforehand, "
                           "but train.conv_weight_grad is ",
                           t.conv_weight_grad, " and train.conv_algorithm ", t.conv_algorithm,
                           ", neither measure"));
    std::istringstream items(t.conv_weight_grad_choices);
    for (std::string item; std::getline(items, item, ',');)
      require(is_conv_choice(item), "train.conv_weight_grad_choices", item,
              "name=gemm or name=onednn, either with +forward, then +winograd or +direct "
              "(or name=winograd or name=direct alone), comma-separated");
  }
  require(t.log_interval >= 1, "train.log_interval", std::to_string(t.log_interval), "at least 1");
  require(t.checkpoint_every >= 0, "train.checkpoint_every", std::to_string(t.checkpoint_every),
          "0 or more");
  require(t.straggler_rank >= -1, "train.straggler_rank", std::to_string(t.straggler_rank),
          "-1 or a rank");
  require(t.straggler_ms >= 0, "train.straggler_ms", format_number(t.straggler_ms), "0 or more");
  require(t.loss_scale_init >= kMinLossScale && t.loss_scale_init <= kMaxLossScale,
          "train.loss_scale_init", format_number(t.loss_scale_init), "from 1 to 16777216");
  require(t.loss_scale_growth_interval >= 1, "train.loss_scale_growth_interval",
          std::to_string(t.loss_scale_growth_interval), "at least 1");
  const auto& m = c.comm;
  require(m.fusion_mib == "auto" || parse_mib(m.fusion_mib) > 0, "comm.fusion_mib",
          shown(m.fusion_mib), "auto or a positive number of MiB");
  require(m.first_bucket_mib >= 0, "comm.first_bucket_mib", format_number(m.first_bucket_mib),
          "0 or more MiB");
  require(m.stall_timeout_s > 0 && m.stall_timeout_s <= kMaxStallTimeoutS, "comm.stall_timeout_s",
          format_number(m.stall_timeout_s), "positive seconds, at most 1e6");
  require(m.chunk_kib >= 0, "comm.chunk_kib", std::to_string(m.chunk_kib),
          "0 (by message size) or more KiB");
  require(m.ranks_per_node >= 0, "comm.ranks_per_node", std::to_string(m.ranks_per_node),
          "0 or more");
  require(m.verify_every >= 0, "comm.verify_every", std::to_string(m.verify_every),
          "0 (only before checkpoints) or more steps");
  const auto& d = c.data;
  require(d.prefetch_batches >= 1, "data.prefetch_batches", std::to_string(d.prefetch_batches),
          "at least 1");
  require(d.augment_pad >= 0 && d.augment_pad <= 16, "data.augment_pad",
          std::to_string(d.augment_pad), "0 to 16 pixels");
  require(d.max_train_samples >= 0, "data.max_train_samples", std::to_string(d.max_train_samples),
          "0 or more");
  require(d.samples_per_rank >= 0, "data.samples_per_rank", std::to_string(d.samples_per_rank),
          "0 or more");
  if ((t.batch_per_rank > 0) == (t.global_batch > 0))
    throw InputError(str(src.deck.empty() ? "command line" : src.deck,
                         ": set exactly one of train.batch_per_rank (weak scaling) and "
                         "train.global_batch (strong scaling); found batch_per_rank = ",
                         t.batch_per_rank, ", global_batch = ", t.global_batch));
}

// train.loss_scale as the run uses it: dynamic, none, or the static scale as a number.
std::string resolve_loss_scale(const TrainConfig& t, const Source& src) {
  if (t.loss_scale == "auto") return default_loss_scale(t.precision);
  if (t.loss_scale == "dynamic" || t.loss_scale == "none") return t.loss_scale;
  const char* text = t.loss_scale.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !(value >= kMinLossScale) ||
      !(value <= kMaxLossScale))
    throw InputError(str(src.of("train.loss_scale"), ": bad value '", shown(t.loss_scale),
                         "' for train.loss_scale (dynamic, none, auto, or a static scale from 1 "
                         "to 16777216)"));
  return format_number(value);
}

std::vector<int> parse_step_epochs(const std::string& text, const Source& src) {
  std::vector<int> epochs;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      int e = std::stoi(item, &used);
      if (used != item.size() || e < 1) throw std::invalid_argument(item);
      epochs.push_back(e);
    } catch (const std::exception&) {
      throw InputError(str(src.of("train.step_epochs"), ": bad value '", shown(text),
                           "' for train.step_epochs (comma-separated epochs, e.g. 30,60)"));
    }
  }
  return epochs;
}

// The command line with each "--key=" split into "--key" "": Boost refuses an empty value
// after '=', yet "" is a meaningful value (data.eval_split = "" means no evaluation), as in a deck.
// Boost wants the arguments after the program's name.
std::vector<std::string> split_empty_values(int argc, const char* const argv[]) {
  std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.find('=') == arg.size() - 1) {
      args[i].pop_back();
      args.insert(args.begin() + long(i) + 1, "");
      ++i;
    }
  }
  return args;
}

// output.name becomes a file name inside output.dir: it must not climb out of it.
void check_output_name(const std::string& name, const Source& src) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw InputError(str(src.of("output.name"), ": bad value '", shown(name),
                         "' for output.name (a file name: not empty, '.' or '..', no '/')"));
}

std::string render_deck(const std::vector<Option>& table) {
  std::ostringstream out;
  std::string section;
  for (const auto& opt : table) {
    std::string key = opt.key;
    std::string sec = key.substr(0, key.find('.'));
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    out << key.substr(key.find('.') + 1) << " = " << field_text(opt.field) << "\n";
  }
  return out.str();
}

}  // namespace

std::string default_loss_scale(const std::string& precision) {
  return precision == "fp16" ? "dynamic" : "none";
}

std::optional<double> fixed_fusion_mib(const CommConfig& comm) {
  if (comm.fusion_mib == "auto") return std::nullopt;
  return parse_mib(comm.fusion_mib);
}

std::optional<bool> fixed_overlap(const CommConfig& comm) {
  if (comm.overlap == "auto") return std::nullopt;
  return comm.overlap == "true";
}

std::string Config::checkpoint_path() const {
  std::string dir = output.checkpoint_dir.empty() ? output.dir : output.checkpoint_dir;
  return dir + "/" + output.name + ".ckpt.h5";
}

std::string help_text() {
  Config defaults;
  std::string step_epochs;
  int64_t seed = int64_t(defaults.train.seed);
  std::ostringstream out;
  out << "usage: ringtrain --deck FILE [--section.key=value ...]\n"
      << "       mpirun -np N ringtrain --deck FILE\n\n"
      << cli_only() << "\n"
      << describe(option_table(defaults, step_epochs, seed));
  return out.str();
}

namespace {

// A table cell: '|' would end it, and a newline the row.
std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '|')
      out += "\\|";
    else
      out += ch == '\n' ? ' ' : ch;
  }
  return out;
}

}  // namespace

std::string help_markdown() {
  Config defaults;
  std::string step_epochs;
  int64_t seed = int64_t(defaults.train.seed);
  std::ostringstream out;
  out << "# Deck reference\n\n"
      << "<!-- Generated from the option table in src/config/config.cpp by `bin/ringtrain "
         "--help-markdown > docs/DECK.md` (`make docs`); tests/e2e/deck_reference.sh fails when "
         "this file differs from it. Edit the table, not this file. -->\n\n"
      << "A deck is an INI file with the sections `[data] [model] [train] [comm] [output]`; "
         "every key can also be given on the command line as `--section.key=value`, which wins "
         "over the deck (`--section.key=` sets an empty value). `ringtrain --help` prints this "
         "table, `ringtrain --deck FILE --print-deck` the effective deck. A wrong key, a bad "
         "value or a missing required key stops every rank with one line naming the deck line, "
         "the key and the value, exit code 2.\n\n"
      << "## Command line\n\n| flag | what |\n|---|---|\n";
  const po::options_description cli = cli_only();
  for (const auto& opt : cli.options()) {
    out << "| `--" << cell(opt->long_name()) << "` | " << cell(opt->description()) << " |\n";
  }
  std::string section;
  for (const auto& opt : option_table(defaults, step_epochs, seed)) {
    const std::string key = opt.key;
    const std::string sec = key.substr(0, key.find('.'));
    if (sec != section) {
      out << "\n## [" << sec << "]\n\n| key | default | what |\n|---|---|---|\n";
      section = sec;
    }
    const std::string text = field_text(opt.field);
    const std::string value = opt.required   ? "(required)"
                              : text.empty() ? "(empty)"
                                             : "`" + text + "`";
    std::string what = opt.help;
    if (!opt.choices.empty()) {
      what += "; one of ";
      for (size_t i = 0; i < opt.choices.size(); ++i)
        what += (i ? ", `" : "`") + opt.choices[i] + "`";
    }
    out << "| `" << key << "` | " << cell(value) << " | " << cell(what) << " |\n";
  }
  return out.str();
}

CommandLine parse_command_line(int argc, const char* const argv[]) {
  CommandLine result;
  Config& c = result.config;
  std::string step_epochs;
  int64_t seed = int64_t(c.train.seed);
  auto table = option_table(c, step_epochs, seed);
  po::options_description keys = describe(table);
  po::options_description all;
  all.add(cli_only()).add(keys);

  Source src;
  po::variables_map vm;
  po::parsed_options cli(&all);
  try {
    // No guessing: Boost took --train.batch=10 for train.batch_per_rank (a unique prefix), so
    // a mistyped or half-remembered key trained silently on a value it never named.
    cli =
        po::command_line_parser(split_empty_values(argc, argv))
            .options(all)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .allow_unregistered()  // store_checked names the key and the nearest real one
            .run();
  } catch (const po::error& e) {
    throw InputError(str("command line: ", e.what(), "; ringtrain --help lists every key"));
  }
  store_checked(cli, vm, all, table, [](const std::string&) { return "command line"; });
  for (const auto& o : cli.options) src.from_cli.insert(o.string_key);

  result.help = vm.count("help") > 0 || vm.count("help-markdown") > 0;
  if (result.help) {
    result.help_text = vm.count("help-markdown") ? help_markdown() : help_text();
    return result;
  }
  result.print_deck = vm.count("print-deck") > 0;
  c.resume = vm.count("resume") > 0;
  // A first try with no arguments at all: name the flag that is missing, not the first key.
  if (!vm.count("deck") && cli.options.empty())
    throw InputError(
        "command line: no deck; give --deck FILE (e.g. --deck inputs/quickstart.deck), or "
        "--help for every key");
  if (vm.count("deck")) {
    src.deck = c.deck_path = vm["deck"].as<std::string>();
    if (std::filesystem::is_directory(src.deck))
      throw InputError(str(src.deck, ": is a directory; --deck takes a deck file (inputs/*.deck)"));
    std::ifstream deck(src.deck);
    if (!deck)
      throw InputError(str(src.deck, ": cannot open the deck (no such file or unreadable)"));
    src.lines = deck_lines(src.deck);
    po::parsed_options parsed(&keys);
    try {
      parsed = po::parse_config_file(deck, keys, true);
    } catch (const po::error& e) {
      throw InputError(str(src.deck, ": ", e.what()));
    }
    store_checked(parsed, vm, keys, table, [&](const std::string& key) { return src.of(key); });
  }
  po::notify(vm);
  for (const auto& opt : table)
    if (opt.required && (!vm.count(opt.key) || field_text(opt.field).empty()))
      throw InputError(str(src.deck.empty() ? "command line" : src.deck, ": missing required key ",
                           opt.key, " (", opt.help, choice_list(opt, "; one of "), ")"));
  if (seed < 0)
    throw InputError(
        str(src.of("train.seed"), ": bad value '", seed, "' for train.seed (0 or more)"));
  c.train.seed = uint64_t(seed);
  c.train.step_epochs = parse_step_epochs(step_epochs, src);
  check_choices_and_ranges(table, c, src);
  c.train.loss_scale = resolve_loss_scale(c.train, src);
  if (vm["output.name"].defaulted())
    c.output.name =
        c.deck_path.empty() ? "ringtrain" : std::filesystem::path(c.deck_path).stem().string();
  check_output_name(c.output.name, src);
  c.effective_deck = render_deck(table);
  return result;
}

void validate_for_world(const Config& c, int world_size) {
  const std::string where = c.deck_path.empty() ? "command line" : c.deck_path;
  if (c.train.global_batch > 0 && c.train.accumulate_steps == 1 &&
      c.train.global_batch % world_size != 0)
    throw InputError(str(where, ": train.global_batch = ", c.train.global_batch,
                         " does not divide over ", world_size,
                         " ranks; use a multiple of the world size or train.batch_per_rank"));
  if (c.train.global_batch > 0 && c.train.accumulate_steps > 1 &&
      c.train.global_batch % (int64_t(world_size) * c.train.accumulate_steps) != 0)
    throw InputError(
        str(where, ": train.global_batch = ", c.train.global_batch,
            " does not divide into train.accumulate_steps = ", c.train.accumulate_steps,
            " micro-batches over ", world_size, " ranks; use a multiple of ",
            int64_t(world_size) * c.train.accumulate_steps, " or train.batch_per_rank"));
  if (c.comm.ranks_per_node > 0 && world_size % c.comm.ranks_per_node != 0)
    throw InputError(str(where, ": comm.ranks_per_node = ", c.comm.ranks_per_node,
                         " does not divide the world size ", world_size));
  if (c.train.straggler_rank >= world_size)
    throw InputError(str(where, ": train.straggler_rank = ", c.train.straggler_rank,
                         " but the world has ranks 0..", world_size - 1));
}

void prepare_output_paths(const Config& c) {
  if (!c.output.checkpoint_dir.empty()) {
    const std::string& dir = c.output.checkpoint_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw InputError(
          str("output.checkpoint_dir ", dir, ": cannot create directory (", ec.message(), ")"));
    if (access(dir.c_str(), W_OK | X_OK) != 0)
      throw InputError(str("output.checkpoint_dir ", dir, ": directory is not writable (",
                           std::strerror(errno), ")"));
  }
  if (!c.output.baseline.empty()) {
    const std::string& file = c.output.baseline;
    if (std::filesystem::is_directory(file))
      throw InputError(str("output.baseline ", file, ": is a directory, not a results file"));
    if (access(file.c_str(), R_OK) != 0)
      throw InputError(str("output.baseline ", file, ": cannot read the results file (",
                           std::strerror(errno), ")"));
  }
}

const std::vector<std::string>& per_rank_keys() {
  static const std::vector<std::string> keys = {"train.threads", "data.prefetch_batches",
                                                "output.dir", "output.baseline"};
  return keys;
}

std::string agreed_config_text(const Config& c) {
  const auto& own = per_rank_keys();
  std::istringstream deck(c.effective_deck);
  std::string line, section, out;
  while (std::getline(deck, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = section + "." + line.substr(0, eq);
    if (std::find(own.begin(), own.end(), key) != own.end()) continue;
    out += key + " = " + line.substr(eq + 3) + "\n";
  }
  // Every rank reads the checkpoint on --resume: the same file, or the runs part ways.
  return out + "--resume = " + (c.resume ? c.checkpoint_path() : std::string("false")) + "\n";
}

std::string threads_warning(const Config& c, int cores, const std::string& why) {
  if (c.train.threads <= cores) return "";
  return str("train.threads = ", c.train.threads, " is more than this rank's ", cores, " core(s) (",
             why,
             "); threads will share cores and each step may run many times "
             "slower. HINT: train.threads = 0 takes this rank's share");
}

}  // namespace ringtrain

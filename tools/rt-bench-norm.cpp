// rt-bench-norm.cpp — a batch norm's passes (cpu backend) as a training step meets them, against
// what they would take with their input in the caches, and against the batch cut into slices.
//
// For each stage of a model (the channels and size of its 3x3 convolutions and the batch norms
// after them) it times, interleaved, each repeat in this order: the convolution forward; the
// batch norm's training forward on the output it just wrote (as the step runs it); the same
// forward again (its input now hot: the floor of our passes); the convolution's backward_data
// (the batch norm's gradient in, as in the step); the batch norm's backward on it; the same again
// (hot); then the convolution and the batch norm forward over the batch cut into slices of
// --slice images, each slice's batch norm straight after its convolution, while its output is
// in the caches. The sliced row is a bound: it normalises each slice by its own statistics,
// which a real sliced step could not (it would come back for the normalising pass), so if the
// sliced convolution + batch norm is not faster than the whole, no slicing of ours can be.
// The batch norms' GB/s count the passes' bytes: forward reads x twice and writes y, backward
// reads x and dy twice and writes dx.
//
//   rt-bench-norm --model resnet18_cifar --threads 2 [--batch 64] [--slice 8] [--repeats 15]
//                 [--precision bf16]   (bf16 activations, as a bf16 step keeps them)
//
// Prints a table of medians and appends JSON lines to output/bench/norm.jsonl.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "bench/bench.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"

namespace po = boost::program_options;
using namespace ringtrain;
using backend::Backend;
using backend::Shape;
using backend::Tensor;

namespace {

struct Options {
  std::string model = "resnet18_cifar", precision = "fp32";
  int batch = 64, threads = 1, slice = 8, repeats = 15;
};

// A model's stages: the channels and the height (= width) of their convolutions' outputs.
struct Stage {
  int channels, size;
};

std::vector<Stage> stages_of(const std::string& model) {
  if (model == "resnet18_cifar") return {{64, 32}, {128, 16}, {256, 8}, {512, 4}};
  if (model == "fibernet") return {{16, 32}, {32, 16}, {64, 8}, {128, 4}};  // 1x64x64 input
  throw InputError("--model " + model +
                   ": known are resnet18_cifar and fibernet (their 3x3 convolutions' stages)");
}

// Medians (ms) of what one stage's repeats timed.
struct Row {
  Stage stage;
  double conv_fwd = 0, bn_fwd_step = 0, bn_fwd_hot = 0, conv_bwd_data = 0, bn_bwd_step = 0,
         bn_bwd_hot = 0, sliced_conv = 0, sliced_bn = 0, other_cores = 0;
  double megabytes = 0;  // one activation tensor of the stage
};

// A plain tensor of `shape` with uniform values in [-bound, bound), from `seed`.
Tensor uniform_tensor(Backend& be, const Shape& shape, uint64_t seed, float bound) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-bound, bound);
  std::vector<float> host(size_t(backend::shape_numel(shape)));
  for (float& v : host) v = uniform(rng);
  Tensor t = be.alloc(shape);
  be.upload(host.data(), t);
  return t;
}

// A tensor of `shape` in the layout a convolution writes (oneDNN's blocked one), with uniform
// values in [-1, 1): the input of a batch norm or convolution as the step hands it over.
Tensor conv_output(Backend& be, const Shape& shape, uint64_t seed) {
  Tensor plain = uniform_tensor(be, shape, seed, 1.0f);
  Tensor identity = be.alloc({shape[1], shape[1], 1, 1}), out;
  std::vector<float> eye(size_t(shape[1] * shape[1]), 0.0f);
  for (int64_t c = 0; c < shape[1]; ++c) eye[size_t(c * shape[1] + c)] = 1.0f;
  be.upload(eye.data(), identity);
  auto conv = be.make_conv({int(shape[1]), int(shape[1]), 1, 1, 0, false});
  conv->forward(plain, identity, nullptr, out);
  return out;
}

// One convolution + batch norm pair of a stage, as the step runs them, and its sliced copy.
class StagePair {
 public:
  StagePair(Backend& be, const Options& o, Stage s)
      : be_(be),
        conv_(be.make_conv({s.channels, s.channels, 3, 1, 1, false})),
        sliced_conv_(be.make_conv({s.channels, s.channels, 3, 1, 1, false})),
        bn_(be.make_batch_norm({s.channels, 1e-5f, true})),
        sliced_bn_(be.make_batch_norm({s.channels, 1e-5f, true})) {
    const Shape whole{o.batch, s.channels, s.size, s.size},
        part{o.slice, s.channels, s.size, s.size};
    u_ = conv_output(be, whole, 1);
    dz_ = conv_output(be, whole, 2);
    for (int i = 0; i < o.batch / o.slice; ++i) slices_.push_back(conv_output(be, part, 10 + i));
    sliced_x_.resize(slices_.size());
    sliced_y_.resize(slices_.size());
    w_ = uniform_tensor(be, {s.channels, s.channels, 3, 3}, 3, 0.05f);
    gamma_ = be.alloc({s.channels});
    beta_ = be.alloc({s.channels});
    dgamma_ = be.alloc({s.channels});
    dbeta_ = be.alloc({s.channels});
    be.fill(gamma_, 1.0f);
    be.fill(beta_, 0.0f);
  }

  // One activation tensor of the stage, in the precision the step stores it.
  double activation_bytes() const {
    return double(u_.numel()) * double(backend::dtype_size(u_.dtype()));
  }

  // One repeat, in the order the head of this file gives: each part's ms into t[0..7].
  void repeat(std::vector<double>& t) {
    t[0] = timed([&] { conv_->forward(u_, w_, nullptr, x_); });
    t[1] = timed([&] { bn_->forward_training(x_, gamma_, beta_, y_, mean_, var_, nullptr); });
    t[2] = timed([&] { bn_->forward_training(x_, gamma_, beta_, y_, mean_, var_, nullptr); });
    t[3] = timed([&] { conv_->backward_data(dz_, w_, dy_); });
    t[4] = timed([&] { backward(); });
    t[5] = timed([&] { backward(); });
    t[6] = t[7] = 0;
    for (size_t i = 0; i < slices_.size(); ++i) {
      t[6] += timed([&] { sliced_conv_->forward(slices_[i], w_, nullptr, sliced_x_[i]); });
      t[7] += timed([&] {
        sliced_bn_->forward_training(sliced_x_[i], gamma_, beta_, sliced_y_[i], mean_, var_,
                                     nullptr);
      });
    }
  }

 private:
  template <typename F>
  double timed(F&& run) {
    Stopwatch clock;
    run();
    be_.synchronize();
    return clock.seconds() * 1e3;
  }
  void backward() { bn_->backward(x_, dy_, gamma_, mean_, var_, dx_, dgamma_, dbeta_, nullptr); }

  Backend& be_;
  std::unique_ptr<backend::ConvOp> conv_, sliced_conv_;
  std::unique_ptr<backend::BatchNormOp> bn_, sliced_bn_;
  Tensor u_, dz_, w_, x_, y_, dy_, dx_, gamma_, beta_, dgamma_, dbeta_, mean_, var_;
  std::vector<Tensor> slices_, sliced_x_, sliced_y_;
};

Row measure_stage(Backend& be, const Options& o, Stage s) {
  StagePair pair(be, o, s);
  std::vector<double> t(8);
  pair.repeat(t);  // warm-up: primitives made, memory touched
  std::vector<std::vector<double>> samples(8);
  bench::OtherCpu cpu;
  Stopwatch wall;
  for (int r = 0; r < o.repeats; ++r) {
    pair.repeat(t);
    for (size_t k = 0; k < t.size(); ++k) samples[k].push_back(t[k]);
  }
  Row row{s};
  row.megabytes = pair.activation_bytes() / 1e6;
  double* cells[] = {&row.conv_fwd,    &row.bn_fwd_step, &row.bn_fwd_hot,  &row.conv_bwd_data,
                     &row.bn_bwd_step, &row.bn_bwd_hot,  &row.sliced_conv, &row.sliced_bn};
  for (size_t k = 0; k < samples.size(); ++k) *cells[k] = median(samples[k]);
  row.other_cores = cpu.cores(wall.seconds());
  return row;
}

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

double gb_s(double units, double megabytes, double ms) {
  return ms > 0 ? units * megabytes / ms : 0;
}

void print_and_record(const Options& o, const std::string& isa, const std::vector<Row>& rows) {
  const std::string cpu = cpu_model();
  std::printf(
      "batch norm passes, %s %s: batch %d, %d thread(s), %s (oneDNN %s), slices of %d, "
      "median of %d\n",
      o.model.c_str(), o.precision.c_str(), o.batch, o.threads, cpu.c_str(), isa.c_str(), o.slice,
      o.repeats);
  std::printf("%-14s %8s | %-22s %-22s %6s | %-22s %-22s %6s | %-24s %7s\n", "stage", "conv ms",
              "BN fwd in step", "BN fwd, input hot", "ratio", "BN bwd in step", "BN bwd, input hot",
              "ratio", "sliced conv + BN fwd", "vs whole");
  std::filesystem::create_directories("output/bench");
  std::ofstream json("output/bench/norm.jsonl", std::ios::app);
  for (const Row& r : rows) {
    const std::string stage = std::to_string(r.stage.channels) + "x" +
                              std::to_string(r.stage.size) + "x" + std::to_string(r.stage.size);
    const double whole = r.conv_fwd + r.bn_fwd_step, sliced = r.sliced_conv + r.sliced_bn;
    std::printf(
        "%-14s %8.3f | %7.3f ms %5.1f GB/s   %7.3f ms %5.1f GB/s   %5.2fx | %7.3f ms %5.1f GB/s "
        "  %7.3f ms %5.1f GB/s   %5.2fx | %7.3f + %7.3f ms     %6.3fx%s\n",
        stage.c_str(), r.conv_fwd, r.bn_fwd_step, gb_s(3, r.megabytes, r.bn_fwd_step), r.bn_fwd_hot,
        gb_s(3, r.megabytes, r.bn_fwd_hot), r.bn_fwd_step / r.bn_fwd_hot, r.bn_bwd_step,
        gb_s(5, r.megabytes, r.bn_bwd_step), r.bn_bwd_hot, gb_s(5, r.megabytes, r.bn_bwd_hot),
        r.bn_bwd_step / r.bn_bwd_hot, r.sliced_conv, r.sliced_bn, sliced / whole,
        r.other_cores > 0.25 ? "  (busy machine)" : "");
    json << "{\"bench\":\"norm\",\"model\":\"" << o.model << "\",\"stage\":\"" << stage
         << "\",\"precision\":\"" << o.precision << "\",\"batch\":" << o.batch
         << ",\"threads\":" << o.threads << ",\"slice\":" << o.slice << ",\"isa\":\"" << isa
         << "\",\"cpu\":\"" << cpu << "\",\"conv_fwd_ms\":" << r.conv_fwd
         << ",\"bn_fwd_step_ms\":" << r.bn_fwd_step << ",\"bn_fwd_hot_ms\":" << r.bn_fwd_hot
         << ",\"conv_bwd_data_ms\":" << r.conv_bwd_data << ",\"bn_bwd_step_ms\":" << r.bn_bwd_step
         << ",\"bn_bwd_hot_ms\":" << r.bn_bwd_hot << ",\"sliced_conv_ms\":" << r.sliced_conv
         << ",\"sliced_bn_fwd_ms\":" << r.sliced_bn << ",\"sliced_vs_whole\":" << sliced / whole
         << ",\"other_cores\":" << r.other_cores << "}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description desc("rt-bench-norm options");
  desc.add_options()("help,h", "print this help and exit")(
      "model", po::value(&o.model)->default_value(o.model),
      "resnet18_cifar or fibernet: whose stages")(
      "batch", po::value(&o.batch)->default_value(o.batch), "images per step")(
      "threads", po::value(&o.threads)->default_value(o.threads), "OpenMP threads")(
      "slice", po::value(&o.slice)->default_value(o.slice),
      "images per slice of the sliced row (divides --batch)")(
      "repeats", po::value(&o.repeats)->default_value(o.repeats), "timed repeats per stage")(
      "precision", po::value(&o.precision)->default_value(o.precision),
      "fp32 or bf16 (bf16 needs AVX512-BF16 or AMX)");
  return bench::run_bench("rt-bench-norm", [&] {
    po::variables_map vm;
    if (!bench::parse_command_line(argc, argv, desc, vm, "rt-bench-norm [options]"))
      return int(kExitOk);
    const std::vector<Stage> stages = stages_of(o.model);
    RT_REQUIRE_INPUT(o.batch > 0 && o.slice > 0 && o.batch % o.slice == 0, "--slice ", o.slice,
                     " must divide --batch ", o.batch);
    RT_REQUIRE_INPUT(o.threads > 0 && o.repeats > 0, "--threads and --repeats must be positive");
    // The step's convolutions: auto's algorithm, as train.conv_algorithm's default.
    auto be =
        backend::make_backend("cpu", o.threads, backend::parse_precision(o.precision),
                              backend::ConvWeightGrad::kOnednn, backend::ConvAlgorithm::kAuto);
    std::vector<Row> rows;
    for (Stage s : stages) rows.push_back(measure_stage(*be, o, s));
    print_and_record(o, be->instruction_set(), rows);
    return int(kExitOk);
  });
}

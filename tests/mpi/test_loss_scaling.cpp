// test_loss_scaling.cpp — dynamic loss scaling over N ranks through the trainer's DataParallel:
// a gradient made non-finite on one rank at step k makes every rank skip step k and halve the
// scale, and the weights stay bitwise equal across ranks and to a run without scaling that
// never took step k's update (a power-of-two scale divides out exactly).
// np: 1 2 3
// quick: 2
#define BOOST_TEST_MODULE loss_scaling
#include <cmath>
#include <cstring>
#include <limits>

#include "fused_replica.hpp"
#include "mpi_test.hpp"
#include "ringtrain/train/loss_scale.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;

namespace {

constexpr int kBatch = 4;  // per rank
constexpr int kSide = 16;
constexpr int kClasses = 5;
constexpr int kSteps = 5;
constexpr int kBadStep = 2;  // from 0
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Where the bad values come from: the loss gradient before backward (an fp16 overflow in one
// rank's backward; the allreduce spreads it), or one reduced gradient after the allreduce on
// one rank only (only the agreed verdict keeps the others from stepping).
enum class Poison { kNone, kLossGradient, kAfterAllreduce };

// Deterministic images and labels of rank `rank`'s part of step `step`.
void make_batch(int step, int rank, std::vector<float>& images, std::vector<int32_t>& labels) {
  images.resize(size_t(kBatch) * kSide * kSide);
  labels.resize(kBatch);
  uint64_t state = uint64_t(step) * 1000003u + uint64_t(rank) * 7919u + 17u;
  for (float& v : images) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = float(int((state >> 33) % 2001) - 1000) / 1000.0f;
  }
  for (int i = 0; i < kBatch; ++i)
    labels[size_t(i)] = int32_t((rank * kBatch + i + step) % kClasses);
}

// cnn_small through the trainer's DataParallel (fused_replica.hpp) over the ring.
struct Replica : rt_test::FusedReplica {
  explicit Replica(const comm::Communicator& comm) : FusedReplica(comm, spec()) {}

  static rt_test::FusedReplicaSpec spec() {
    rt_test::FusedReplicaSpec spec;
    spec.model = "cnn_small";
    spec.seed = 42;
    spec.side = kSide;
    spec.classes = kClasses;
    spec.sgd.momentum = 0.9;
    spec.sgd.weight_decay = 1e-4;
    return spec;
  }

  // Forward, backward (loss gradient x grad_scale) and the allreduce of one step.
  void reduce_step(int step, int rank, float grad_scale) {
    std::vector<float> images;
    std::vector<int32_t> labels;
    make_batch(step, rank, images, labels);
    reduce(images, labels, grad_scale);
  }
};

struct ScaledRun {
  std::vector<float> weights;
  std::vector<double> scales;  // after each step
  std::string verdicts;        // 's' step, 'o' overflow, 'n' nonfinite, per step
  bool identical = true;       // weights bitwise equal across ranks after every step
};

// kSteps of dynamic loss scaling (growth every 2 clean steps), step kBadStep poisoned on the
// last rank as `poison` says, every rank as the trainer does (DataParallel::end_scaled_step).
ScaledRun train_scaled(Poison poison) {
  comm::Communicator comm;
  const int bad_rank = comm.size() - 1;
  Replica r(comm);
  train::LossScaleOptions options;
  options.growth_interval = 2;
  train::LossScaler scaler(options);
  r.parallel->set_loss_scale(scaler.scale());
  ScaledRun run;
  for (int step = 0; step < kSteps; ++step) {
    const bool poisoned = step == kBadStep && comm.rank() == bad_rank;
    float grad_scale = float(scaler.scale());
    if (poisoned && poison == Poison::kLossGradient) grad_scale = kNaN;
    r.reduce_step(step, comm.rank(), grad_scale);
    if (poisoned && poison == Poison::kAfterAllreduce) {
      nn::Parameter& p = *r.model->parameters().back();
      std::vector<float> host(size_t(p.numel()));
      r.be->download(p.grad, host.data());
      host[host.size() / 2] = kNaN;
      r.be->upload(host.data(), p.grad);
    }
    train::ScaleVerdict v = r.parallel->end_scaled_step(scaler);
    if (v == train::ScaleVerdict::kStep) r.sgd->step(0.05);
    run.verdicts += v == train::ScaleVerdict::kStep       ? 's'
                    : v == train::ScaleVerdict::kOverflow ? 'o'
                                                          : 'n';
    run.scales.push_back(scaler.scale());
    run.identical = run.identical && rt_test::identical_on_every_rank(r.weights());
  }
  run.weights = r.weights();
  return run;
}

// The same steps without loss scaling, step kBadStep's update left out.
std::vector<float> train_unscaled_without_bad_step() {
  comm::Communicator comm;
  Replica r(comm);
  for (int step = 0; step < kSteps; ++step) {
    r.reduce_step(step, comm.rank(), 1.0f);
    if (step != kBadStep) r.sgd->step(0.05);
  }
  return r.weights();
}

void check_skipped_everywhere(Poison poison) {
  const ScaledRun run = train_scaled(poison);
  const std::vector<float> reference = train_unscaled_without_bad_step();
  BOOST_TEST(rt_test::all_ok(run.verdicts == "ssoss"), "verdicts " << run.verdicts);
  const std::vector<double> scales{65536, 131072, 65536, 65536, 131072};
  BOOST_TEST(rt_test::all_ok(run.scales == scales), "the scale halved at the bad step only");
  BOOST_TEST(rt_test::all_ok(run.identical), "weights bitwise equal on every rank, every step");
  BOOST_TEST(rt_test::all_ok(run.weights.size() == reference.size() &&
                             std::memcmp(run.weights.data(), reference.data(),
                                         reference.size() * sizeof(float)) == 0),
             "weights bitwise those of an unscaled run without step " << kBadStep << "'s update");
}

}  // namespace

BOOST_AUTO_TEST_CASE(clean_steps_scale_out_exactly) {
  const ScaledRun run = train_scaled(Poison::kNone);
  BOOST_TEST(rt_test::all_ok(run.verdicts == "sssss"), "verdicts " << run.verdicts);
  BOOST_TEST(rt_test::all_ok(run.scales.back() == 65536.0 * 4),
             "final scale " << run.scales.back());
  BOOST_TEST(rt_test::all_ok(run.identical));
}

BOOST_AUTO_TEST_CASE(nan_loss_gradient_on_one_rank_skips_the_step_on_every_rank) {
  check_skipped_everywhere(Poison::kLossGradient);
}

BOOST_AUTO_TEST_CASE(nan_after_the_allreduce_on_one_rank_skips_the_step_on_every_rank) {
  check_skipped_everywhere(Poison::kAfterAllreduce);
}

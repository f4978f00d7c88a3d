// test_data_parallel.cpp — training on N ranks through the fusion engine: weights stay
// bitwise identical across ranks after every step (cpu; cuda where a GPU is, shared or not), and N
// ranks x batch b match 1 rank x batch N*b (no BN; synchronized BN) within a stated float
// tolerance.
// np: 1 2 3 4
// quick: 2
#define BOOST_TEST_MODULE data_parallel
#include <cmath>

#include "model_weights.hpp"
#include "mpi_test.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/device_wait.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/train/data_parallel.hpp"
#include "ringtrain/train/gpu_binding.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;

namespace {

constexpr int kBatch = 4;  // per rank
constexpr int kSide = 16;
constexpr int kClasses = 5;
constexpr int kSteps = 4;

// Deterministic inputs and labels of one sample, a function of (step, global sample index).
void make_sample(int step, int index, float* image, int32_t* label) {
  uint64_t state = uint64_t(step) * 1000003u + uint64_t(index) * 7919u + 17u;
  for (int i = 0; i < kSide * kSide; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    image[i] = float(int((state >> 33) % 2001) - 1000) / 1000.0f;
  }
  *label = int32_t((index * 3 + step) % kClasses);
}

// The batch of samples [first, first + n) of a step.
void make_batch(int step, int first, int n, std::vector<float>& images,
                std::vector<int32_t>& labels) {
  images.resize(size_t(n) * kSide * kSide);
  labels.resize(size_t(n));
  for (int i = 0; i < n; ++i)
    make_sample(step, first + i, images.data() + size_t(i) * kSide * kSide, &labels[size_t(i)]);
}

// Where a replica computes: the cpu backend, or one GPU (shared by the ranks or not).
struct Device {
  backend::Precision precision = backend::Precision::kF32;
  int cuda_device = -1;  // >= 0: the cuda backend on that GPU

  std::unique_ptr<backend::Backend> make() const {
    if (cuda_device < 0) return backend::make_backend("cpu", 1, precision);
    backend::CudaOptions options;
    options.device = cuda_device;
    options.precision = precision;
    return backend::make_cuda_backend(options);
  }
};

struct Replica {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<nn::Optimizer> sgd;
  backend::Tensor input;

  Replica(const std::string& name, uint64_t seed, Device device = {}) {
    be = device.make();
    model = nn::make_model(name, {1, kSide, kSide}, kClasses, *be, seed);
    nn::OptimizerOptions options;
    options.momentum = 0.9;
    options.weight_decay = 1e-4;
    sgd = std::make_unique<nn::Optimizer>(model->parameters(), options, *be);
  }

  void forward_loss(const std::vector<float>& images, const std::vector<int32_t>& labels) {
    backend::Shape shape{int64_t(labels.size()), 1, kSide, kSide};
    if (input.empty() || input.shape() != shape) input = be->alloc(shape);
    be->upload(images.data(), input);
    model->forward(input, true);
    model->loss(labels.data());
  }

  std::vector<float> weights() const { return rt_test::model_weights(*model, *be); }
};

// The data-parallel replica: the trainer's own DataParallel binds the gradients into the
// fusion engine's buckets.
struct ParallelReplica : Replica {
  std::unique_ptr<comm::allreduce::Allreducer> reducer;
  std::unique_ptr<comm::allreduce::Allreducer> stats;
  std::unique_ptr<train::DataParallel> parallel;

  int accumulate_steps;
  bool quiet_micro_steps = true;  // no bucket reduced before a step's last micro-batch

  ParallelReplica(const comm::Communicator& comm, const std::string& name, bool sync_bn,
                  int accumulate = 1, Device device = {},
                  comm::allreduce::Algorithm algorithm = comm::allreduce::Algorithm::ring)
      : Replica(name, 42, device), accumulate_steps(accumulate) {
    comm::allreduce::AllreduceOptions options;
    options.cuda_device = device.cuda_device;
    reducer = comm::allreduce::make_allreducer(comm, algorithm, options);
    stats = comm::allreduce::make_allreducer(comm, comm::allreduce::Algorithm::mpi,
                                             comm::allreduce::AllreduceOptions{});
    // As the trainer: one rank has nothing to synchronise with.
    if (sync_bn && comm.size() > 1)
      model->set_stat_reducer([this](float* v, size_t n) { stats->sum(v, n); });
    comm::fusion::FusionOptions fusion;
    fusion.fusion_mib = 0.05;  // several buckets even for these small models
    fusion.first_bucket_mib = 0.01;
    fusion.stall_timeout_s = 60;
    parallel = std::make_unique<train::DataParallel>(comm, *model, *be, *reducer, *stats, fusion,
                                                     nullptr, accumulate_steps);
  }

  // One optimizer step; micro-batch m of rank r holds the global samples the sampler gives it:
  // [m*N*b + r*b, m*N*b + (r+1)*b) of the step's N*K*b.
  void step(int step_index, int rank, int world, double lr) {
    const auto& engine = parallel->engine();
    const size_t records_before = engine.records().size();
    const int64_t engine_step = engine.step();
    for (int micro = 0; micro < accumulate_steps; ++micro) {
      std::vector<float> images;
      std::vector<int32_t> labels;
      make_batch(step_index, (micro * world + rank) * kBatch, kBatch, images, labels);
      forward_loss(images, labels);
      parallel->backward(micro);
      if (micro + 1 < accumulate_steps)
        quiet_micro_steps = quiet_micro_steps && engine.records().size() == records_before &&
                            engine.step() == engine_step;
    }
    parallel->synchronize();
    // Exactly one reduction per bucket per optimizer step, none on the micro-batches before.
    quiet_micro_steps = quiet_micro_steps &&
                        engine.records().size() == records_before + engine.bucket_count() &&
                        engine.step() == engine_step + 1;
    sgd->step(lr);
  }
};

// The single-process reference: 1 rank, the whole global batch.
void reference_step(Replica& ref, int step, int global_batch, double lr) {
  std::vector<float> images;
  std::vector<int32_t> labels;
  make_batch(step, 0, global_batch, images, labels);
  ref.forward_loss(images, labels);
  ref.model->backward();
  ref.sgd->step(lr);
}

// Trains kSteps on every rank and on a 1-rank reference; returns the max abs difference
// between the N-rank weights and the reference's, and checks bitwise equality each step.
double train_and_compare(const std::string& model, bool sync_bn, int accumulate = 1) {
  comm::Communicator comm;
  const int world = comm.size(), rank = comm.rank();
  ParallelReplica replica(comm, model, sync_bn, accumulate);
  Replica reference(model, 42);
  const double lr = 0.05;
  bool identical = true;
  for (int step = 0; step < kSteps; ++step) {
    replica.step(step, rank, world, lr);
    reference_step(reference, step, world * accumulate * kBatch, lr);
    bool same = rt_test::identical_on_every_rank(replica.weights());
    if (!same) BOOST_TEST_MESSAGE("rank weights differ after step " << step);
    identical = identical && same;
  }
  BOOST_TEST(rt_test::all_ok(identical),
             "weights bitwise identical on every rank after every step");
  BOOST_TEST(rt_test::all_ok(replica.quiet_micro_steps),
             "one reduction per bucket per optimizer step, none before its last micro-batch");
  std::vector<float> mine = replica.weights(), ref = reference.weights();
  double max_diff = 0, max_weight = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(mine[i] - ref[i])));
    max_weight = std::max(max_weight, double(std::fabs(ref[i])));
  }
  if (rank == 0)
    BOOST_TEST_MESSAGE(model << (sync_bn ? " (sync BN)" : "") << ": " << world << " ranks x "
                             << accumulate << " micro-batches x " << kBatch << " vs 1 rank x "
                             << world * accumulate * kBatch << " after " << kSteps
                             << " steps: max |w_N - w_1| = " << max_diff
                             << " (max |w| = " << max_weight << ")");
  return max_diff;
}

// The stated tolerance: the two runs sum the same gradients in a different order, so
// they differ by float rounding, amplified a little by 4 steps of momentum SGD.
constexpr double kTolerance = 2e-5;

}  // namespace

BOOST_AUTO_TEST_CASE(no_bn_model_matches_one_rank_with_the_global_batch) {
  double diff = train_and_compare("cnn_small", false);
  BOOST_TEST(rt_test::all_ok(diff <= kTolerance), "max |w_N - w_1| = " << diff);
}

// Gradient accumulation: N ranks x K micro-batches of b reach the weights of 1 rank x batch
// N*K*b (no BN: batch statistics would differ per micro-batch); on 1 rank this is K micro-
// batches against one batch of K*b.
BOOST_AUTO_TEST_CASE(accumulated_micro_batches_match_one_rank_with_the_whole_batch) {
  for (int accumulate : {2, 3}) {
    double diff = train_and_compare("cnn_small", false, accumulate);
    BOOST_TEST(rt_test::all_ok(diff <= kTolerance),
               "K = " << accumulate << ": max |w_N - w_1| = " << diff);
  }
}

BOOST_AUTO_TEST_CASE(sync_bn_model_matches_one_rank_with_the_global_batch) {
  double diff = train_and_compare("fibernet", true);
  BOOST_TEST(rt_test::all_ok(diff <= kTolerance), "max |w_N - w_1| = " << diff);
}

BOOST_AUTO_TEST_CASE(per_rank_bn_keeps_weights_identical_across_ranks) {
  // Per-rank BN statistics differ between ranks, but the reduced gradients and so the
  // weights must not: only the 1-rank comparison is off here.
  train_and_compare("fibernet", false);
}

// DataParallel::average_bn_buffers: after per-rank BN steps every rank holds the mean of the
// ranks' running statistics, bitwise equal across ranks, and within float rounding of the mean
// computed here in double from every rank's values (the reducer's summation order is MPI's).
BOOST_AUTO_TEST_CASE(bn_buffer_average_is_the_mean_over_ranks) {
  comm::Communicator comm;
  const int world = comm.size(), rank = comm.rank();
  ParallelReplica replica(comm, "fibernet", false);
  replica.step(0, rank, world, 0.05);

  auto buffers = [&] {
    std::vector<float> all;
    for (const auto& buffer : replica.model->buffers()) {
      std::vector<float> host(size_t(buffer.tensor->numel()));
      replica.be->download(*buffer.tensor, host.data());
      all.insert(all.end(), host.begin(), host.end());
    }
    return all;
  };
  std::vector<float> before = buffers();
  BOOST_TEST_REQUIRE(!before.empty());
  std::vector<float> every(before.size() * size_t(world));
  MPI_Allgather(before.data(), int(before.size()), MPI_FLOAT, every.data(), int(before.size()),
                MPI_FLOAT, MPI_COMM_WORLD);
  if (world > 1)  // the ranks saw different samples, so their statistics differ before
    BOOST_TEST(!rt_test::identical_on_every_rank(before));

  replica.parallel->average_bn_buffers();
  std::vector<float> after = buffers();
  BOOST_TEST(rt_test::identical_on_every_rank(after),
             "BN buffers bitwise identical on every rank after the average");
  double worst = 0;  // in units of the float rounding the sum and the division may add
  for (size_t i = 0; i < before.size(); ++i) {
    double sum = 0, magnitude = 0;
    for (int r = 0; r < world; ++r) {
      sum += every[size_t(r) * before.size() + i];
      magnitude += std::fabs(every[size_t(r) * before.size() + i]);
    }
    const double allowed = double(world + 1) * std::ldexp(1.0, -24) * magnitude / world + 1e-30;
    worst = std::max(worst, std::fabs(double(after[i]) - sum / world) / allowed);
  }
  BOOST_TEST_MESSAGE("BN average: worst error " << worst << " of the float rounding allowed");
  BOOST_TEST(rt_test::all_ok(worst <= 1.0), "BN buffers are the mean over ranks: " << worst);
}

// In bf16 (activations and convolutions; fp32 weights, gradients and reduction) the weights
// stay bitwise identical on every rank after every step, with per-rank and synchronized BN.
BOOST_AUTO_TEST_CASE(bf16_weights_identical_across_ranks_after_every_step) {
  comm::Communicator comm;
  const int world = comm.size(), rank = comm.rank();
  for (bool sync_bn : {false, true}) {
    std::unique_ptr<ParallelReplica> replica;
    try {
      replica = std::make_unique<ParallelReplica>(comm, "fibernet", sync_bn, 1,
                                                  Device{backend::Precision::kBF16});
    } catch (const InputError& e) {  // the same CPU on every rank: all skip together
      BOOST_TEST_MESSAGE("bf16 skipped: " << e.what());
      return;
    }
    bool identical = true;
    for (int step = 0; step < kSteps; ++step) {
      replica->step(step, rank, world, 0.05);
      identical = identical && rt_test::identical_on_every_rank(replica->weights());
    }
    BOOST_TEST(rt_test::all_ok(identical),
               "bf16, sync BN " << sync_bn << ": weights bitwise identical on every rank");
  }
}

// On the cuda backend, the ranks of a node on one GPU when they outnumber its GPUs
// (train.share_gpus) or each on its own, reducing device memory through auto (what a shared GPU
// runs; NCCL takes one rank per GPU): weights bitwise identical on every rank after every step,
// in fp32 and bf16, with synchronized BN. Needs a GPU; skips, said, without one.
BOOST_AUTO_TEST_CASE(cuda_weights_identical_across_ranks_on_shared_or_own_gpus,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       boost::test_tools::assertion_result gpu(backend::cuda_device_count() > 0);
                       gpu.message() << "needs a GPU (" << backend::cuda_device_status() << ")";
                       return gpu;
                     })) {
  comm::Communicator comm;
  const int world = comm.size(), rank = comm.rank();
  const backend::NodeGpus node = train::gather_node_gpus(comm);
  const int gpu = backend::select_local_device(node, comm.local_rank(), true);
  for (backend::Precision precision : {backend::Precision::kF32, backend::Precision::kBF16}) {
    ParallelReplica replica(comm, "fibernet", true, 1, Device{precision, gpu},
                            comm::allreduce::Algorithm::automatic);
    bool identical = true;
    for (int step = 0; step < kSteps; ++step) {
      replica.step(step, rank, world, 0.05);
      identical = identical && rt_test::identical_on_every_rank(replica.weights());
    }
    BOOST_TEST(rt_test::all_ok(identical), "cuda " << backend::precision_name(precision)
                                                   << " on GPU " << gpu
                                                   << ": weights bitwise identical");
  }
}

namespace {

// An allreducer that fails as NcclAllreduce does, through the same wait: on rank `failing` NCCL
// reports an asynchronous error in the first reduction of step `fail_step`; the other ranks' NCCL
// then reports the remote failure. Every wait aborts its communicator once.
class FailingDeviceReducer final : public comm::allreduce::Allreducer {
 public:
  FailingDeviceReducer(int rank, int failing, int fail_step)
      : rank_(rank), failing_(failing), fail_step_(fail_step) {}
  void sum(float*, size_t) override {}
  void sum_and_divide(float*, size_t, float) override {
    if (step_ < fail_step_) return;
    comm::allreduce::DeviceWaitOps ops;
    ops.finished = [] { return false; };
    ops.async_error = [this] {
      return rank_ == failing_ ? std::string("unhandled system error (fake: NIC down)")
                               : std::string("remote process exited or there was a network error");
    };
    ops.abort = [this] { ++aborts; };
    comm::allreduce::wait_for_device(str("nccl allreduce on rank ", rank_), 60, ops);
  }
  std::string name() const override { return "failing"; }
  void next_step() { ++step_; }
  int aborts = 0;

 private:
  int rank_, failing_, fail_step_, step_ = 0;
};

}  // namespace

// A failing NCCL reduction on the last rank in step 1: synchronize() throws on every rank with
// its own rank's named error (NCCL's reason), each communicator is aborted once, and the engine
// refuses the next step instead of waiting. (The trainer then prints it and aborts the job.)
BOOST_AUTO_TEST_CASE(a_failing_device_reduction_is_named_on_every_rank) {
  comm::Communicator comm;
  const int rank = comm.rank(), failing = comm.size() - 1;
  Replica replica("cnn_small", 42);
  FailingDeviceReducer reducer(rank, failing, 1);
  auto stats = comm::allreduce::make_allreducer(comm, comm::allreduce::Algorithm::mpi, {});
  comm::fusion::FusionOptions fusion;
  fusion.stall_timeout_s = 60;
  train::DataParallel parallel(comm, *replica.model, *replica.be, reducer, *stats, fusion);
  std::string message;
  for (int step = 0; step < 2 && message.empty(); ++step) {
    std::vector<float> images;
    std::vector<int32_t> labels;
    make_batch(step, rank * kBatch, kBatch, images, labels);
    replica.forward_loss(images, labels);
    parallel.backward();
    try {
      parallel.synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    reducer.next_step();
  }
  const std::string expected =
      rank == failing
          ? str("nccl allreduce on rank ", rank,
                ": NCCL reports unhandled system error (fake: NIC down); communicator aborted")
          : str("nccl allreduce on rank ", rank,
                ": NCCL reports remote process exited or there was a network error; "
                "communicator aborted");
  BOOST_TEST(message == expected);
  BOOST_TEST(reducer.aborts == 1);
  BOOST_TEST(rt_test::all_ok(message == expected && reducer.aborts == 1));
  std::string again;
  try {
    parallel.synchronize();
  } catch (const Error& e) {
    again = e.what();
  }
  BOOST_TEST(again == expected);  // the engine keeps the error; nothing waits
}

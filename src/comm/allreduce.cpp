// allreduce.cpp — algorithm selection, the MPI_Allreduce reference and the hierarchical variant.
#include "ringtrain/comm/allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "device_staging.hpp"
#include "nccl_allreducer.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/halving_doubling.hpp"
#include "ringtrain/comm/ring_allreduce.hpp"
#include "ringtrain/comm/wire_format.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {
namespace {

// Largest element count handed to one MPI collective call (MPI counts are int).
constexpr size_t kMaxPiece = size_t(1) << 30;

// MPI_Allreduce on a duplicate of the world: the reference every test and benchmark uses.
class MpiAllreduce final : public Allreducer {
 public:
  MpiAllreduce(const Communicator& comm, const AllreduceOptions& options)
      : comm_(duplicate(comm.raw())), validate_(options.validate_counts) {}

  void sum(float* data, size_t count) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (validate_) check_same_count(comm_.get(), count, "mpi allreduce");
    for (size_t done = 0; done < count; done += kMaxPiece) {
      const int piece = static_cast<int>(std::min(kMaxPiece, count - done));
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, piece, MPI_FLOAT, MPI_SUM, comm_.get()));
    }
  }
  std::string name() const override { return "mpi"; }

 private:
  CommHandle comm_;
  bool validate_;
  std::mutex mutex_;
};

// Reduce to each node's leader (MPI_Reduce on the node's shared-memory group), a ring
// across the leaders, and a broadcast back inside each node. Every rank ends with the
// leaders' ring result, itself bitwise identical on every leader.
class HierarchicalAllreduce final : public Allreducer {
 public:
  HierarchicalAllreduce(const Communicator& comm, const AllreduceOptions& options)
      : world_(duplicate(comm.raw())), options_(options) {
    const int rank = comm.rank();
    // Nodes: the communicator's, or consecutive groups of options.ranks_per_node ranks.
    const int node = options.ranks_per_node > 0 ? rank / options.ranks_per_node : comm.node_index();
    MPI_Comm local = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(world_.get(), node, rank, &local));
    local_ = CommHandle(local);
    MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
    MPI_CHECK(MPI_Comm_size(local, &local_size_));
    MPI_CHECK(MPI_Comm_split(world_.get(), local_rank_ == 0 ? 0 : MPI_UNDEFINED, node, &leaders));
    if (leaders != MPI_COMM_NULL) {
      leaders_ = CommHandle(leaders);
      MPI_CHECK(MPI_Comm_set_errhandler(leaders, MPI_ERRORS_RETURN));
      int n = 1;
      MPI_CHECK(MPI_Comm_size(leaders, &n));
      std::vector<int> ring(n);
      for (int i = 0; i < n; ++i) ring[i] = i;  // leaders ordered by node index
      AllreduceOptions ring_options = options;
      ring_options.validate_counts = false;  // checked once, over the world, below
      ring_ = std::make_unique<RingAllreduce>(leaders, ring, ring_options);
    }
  }

  void sum(float* data, size_t count) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (options_.validate_counts) check_same_count(world_.get(), count, "hierarchical allreduce");
    if (count == 0) return;
    for (size_t done = 0; done < count && local_size_ > 1; done += kMaxPiece) {
      const int piece = static_cast<int>(std::min(kMaxPiece, count - done));
      if (local_rank_ == 0)
        MPI_CHECK(
            MPI_Reduce(MPI_IN_PLACE, data + done, piece, MPI_FLOAT, MPI_SUM, 0, local_.get()));
      else
        MPI_CHECK(MPI_Reduce(data + done, nullptr, piece, MPI_FLOAT, MPI_SUM, 0, local_.get()));
    }
    if (ring_) ring_->sum(data, count);
    for (size_t done = 0; done < count && local_size_ > 1; done += kMaxPiece) {
      const int piece = static_cast<int>(std::min(kMaxPiece, count - done));
      MPI_CHECK(MPI_Bcast(data + done, piece, MPI_FLOAT, 0, local_.get()));
    }
  }
  std::string name() const override {
    return options_.wire == Wire::fp32 ? "hierarchical"
                                       : "hierarchical/" + to_string(options_.wire);
  }
  void set_spin_hint(const std::atomic<bool>* hint) override {
    if (ring_) ring_->set_spin_hint(hint);
  }

 private:
  CommHandle world_, local_, leaders_;
  AllreduceOptions options_;
  int local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<RingAllreduce> ring_;
  std::mutex mutex_;
};

// Per call, rhd or ring by size and world size (choose_automatic); counts are checked once.
class AutoAllreduce final : public Allreducer {
 public:
  AutoAllreduce(const Communicator& comm, const AllreduceOptions& options)
      : comm_(duplicate(comm.raw())), options_(options), n_(comm.size()) {
    AllreduceOptions inner = options;
    inner.validate_counts = false;
    ring_ = std::make_unique<RingAllreduce>(comm.raw(), comm.ring_order(), inner);
    rhd_ = std::make_unique<HalvingDoubling>(comm.raw(), inner);
  }
  void sum(float* data, size_t count) override { sum_and_divide(data, count, 1.0f); }
  void sum_and_divide(float* data, size_t count, float divisor) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (options_.validate_counts) check_same_count(comm_.get(), count, "auto allreduce");
    // Every rank passes the same count, so every rank picks the same algorithm.
    Allreducer& chosen = choose_automatic(count * sizeof(float), n_) == Algorithm::ring
                             ? static_cast<Allreducer&>(*ring_)
                             : static_cast<Allreducer&>(*rhd_);
    chosen.sum_and_divide(data, count, divisor);
  }
  std::string name() const override {
    return options_.wire == Wire::fp32 ? "auto" : "auto/" + to_string(options_.wire);
  }
  void set_spin_hint(const std::atomic<bool>* hint) override { ring_->set_spin_hint(hint); }

 private:
  CommHandle comm_;
  AllreduceOptions options_;
  int n_;
  std::unique_ptr<RingAllreduce> ring_;
  std::unique_ptr<HalvingDoubling> rhd_;
  std::mutex mutex_;
};

}  // namespace

void Allreducer::sum_and_divide(float* data, size_t count, float divisor) {
  sum(data, count);
  if (divisor != 1.0f) divide_floats(data, count, divisor);
}

// Measured with rt-allreduce-bench on this 2-core VM (OpenMPI 4.1.4, vader + CMA, medians of
// 50 iterations, time in us, ring / rhd / MPI_Allreduce in the same run; the machine is
// shared, so a row is only compared within itself):
//  - up to 32 KiB, rhd's whole-vector doubling (doubling_max_bytes) takes the fewest steps:
//    4 ranks 16 KiB 47 / 29 / 39, 32 KiB 54 / 39 / 46; 2 ranks 16 KiB 9.5 / 7.5 / 9.5.
//    At 64 KiB it ties (4 ranks 70 / 63 / 62) and past it sends too many bytes (128 KiB
//    143 / 156 / 137), so halving-doubling takes over inside rhd there.
//  - 2 ranks: past the doubling range rhd is the ring's exchange pattern exactly (one halving
//    step, one doubling step); the ring is kept, it is the path the tests have run longest.
//  - 4 ranks (power of two): halving-doubling against the ring, three back-to-back runs of
//    rt-allreduce-bench --algorithms ring,rhd,mpi on the quiet machine, MPI time / ours,
//    median of the three (ring | rhd): 256K 0.93 | 0.97, 512K 0.91 | 0.92, 1M 0.89 | 0.94,
//    2M 0.84 | 0.92, 4M 0.87 | 0.95, 8M 0.86 | 0.97, 16M 0.93 | 1.15, 32M 1.44 | 1.40,
//    64M 1.63 | 1.61. rhd is ahead or level at every size up to 16 MiB, level above; the
//    ring is kept past 16 MiB, where on a real network its neighbour-only traffic maps onto
//    the topology better than halving-doubling's partners at distance 2^k.
//  - other sizes of world (3, 5, ...): rhd's fold sends the whole vector once more each way,
//    so it only pays while steps, not bytes, cost: rhd up to 64 KiB, ring above.
// 2 ranks, ring, MPI time / ours in two back-to-back runs per chunk size (quiet machine):
//   chunk   |   4 MiB    |   8 MiB    |   16 MiB   |   32 MiB
//   256 KiB | 0.84 0.82  | 0.88 0.91  | 1.27 1.35  | 1.84 1.88
//   1 MiB   | 1.05 1.01  | 0.99 0.97  | 0.84 0.86  | 1.29 1.30
//   4 MiB   |     -      | 1.02 1.01  | 0.95 1.03  | 1.48 1.48
// Past the last-level cache the adds want chunks that stay in L2 while they are summed;
// below it, fewer and larger messages cost less. (8 chunks per segment was the worst case at
// every chunk size.) On 4 ranks 256 KiB was level or ahead from 8 MiB up as well.
size_t chunk_bytes_for(size_t configured, size_t message_bytes) {
  if (configured > 0) return configured;
  return message_bytes >= (16u << 20) ? (256u << 10) : (1u << 20);
}

void check_pipeline_options(const AllreduceOptions& options) {
  RT_REQUIRE_INPUT(
      options.chunk_bytes == 0 ||
          (options.chunk_bytes >= 4 && options.chunk_bytes <= (size_t(1) << 30)),
      "allreduce chunk size must be 0 (by message size) or between 4 bytes and 1 GiB, not ",
      options.chunk_bytes, " bytes");
  RT_REQUIRE_INPUT(options.chunks_in_flight >= 1 && options.chunks_in_flight <= 64,
                   "allreduce chunks in flight must be between 1 and 64, not ",
                   options.chunks_in_flight);
}

Algorithm choose_automatic(size_t bytes, int world_size) {
  const bool power_of_two = (world_size & (world_size - 1)) == 0;
  if (world_size <= 2) return bytes <= (32u << 10) ? Algorithm::rhd : Algorithm::ring;
  if (power_of_two) return bytes <= (16u << 20) ? Algorithm::rhd : Algorithm::ring;
  return bytes <= (64u << 10) ? Algorithm::rhd : Algorithm::ring;
}

Algorithm parse_algorithm(const std::string& text) {
  if (text == "ring") return Algorithm::ring;
  if (text == "rhd") return Algorithm::rhd;
  if (text == "auto") return Algorithm::automatic;
  if (text == "mpi") return Algorithm::mpi;
  if (text == "hierarchical") return Algorithm::hierarchical;
  if (text == "nccl") return Algorithm::nccl;
  throw InputError(str("unknown allreduce algorithm '", text,
                       "': choose ring, rhd, auto, mpi, hierarchical or nccl"));
}

std::string to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring:
      return "ring";
    case Algorithm::rhd:
      return "rhd";
    case Algorithm::automatic:
      return "auto";
    case Algorithm::mpi:
      return "mpi";
    case Algorithm::hierarchical:
      return "hierarchical";
    case Algorithm::nccl:
      return "nccl";
  }
  return "unknown";
}

Wire parse_wire(const std::string& text) {
  if (text == "fp32") return Wire::fp32;
  if (text == "bf16") return Wire::bf16;
  if (text == "fp16") return Wire::fp16;
  throw InputError(str("unknown allreduce wire format '", text, "': choose fp32, bf16 or fp16"));
}

std::string to_string(Wire wire) {
  switch (wire) {
    case Wire::fp32:
      return "fp32";
    case Wire::bf16:
      return "bf16";
    case Wire::fp16:
      return "fp16";
  }
  return "unknown";
}

double wire_unit_roundoff(Wire wire) {
  switch (wire) {
    case Wire::bf16:
      return std::ldexp(1.0, -8);
    case Wire::fp16:
      return std::ldexp(1.0, -11);
    default:
      return 0;
  }
}

double wire_error_bound(Wire wire, int n, double abs_sum) {
  const double u = wire_unit_roundoff(wire);
  double bound = (std::pow(1 + u, n) - 1) * abs_sum + n * std::ldexp(1.0, -24) * abs_sum;
  if (wire == Wire::fp16) bound += n * std::ldexp(1.0, -25);
  return bound;
}

// The chosen algorithm on the memory it natively reduces (host; device for nccl).
static std::unique_ptr<Allreducer> make_selected(const Communicator& comm, Algorithm algorithm,
                                                 const AllreduceOptions& options) {
  switch (algorithm) {
    case Algorithm::ring:
      return std::make_unique<RingAllreduce>(comm.raw(), comm.ring_order(), options);
    case Algorithm::rhd:
      return std::make_unique<HalvingDoubling>(comm.raw(), options);
    case Algorithm::automatic:
      return std::make_unique<AutoAllreduce>(comm, options);
    case Algorithm::mpi:
      RT_REQUIRE_INPUT(
          options.wire == Wire::fp32, "allreduce wire format ", to_string(options.wire),
          " needs algorithm ring, rhd, auto or hierarchical (MPI_Allreduce sends fp32)");
      return std::make_unique<MpiAllreduce>(comm, options);
    case Algorithm::hierarchical:
      return std::make_unique<HierarchicalAllreduce>(comm, options);
    case Algorithm::nccl:
#if RINGTRAIN_HAS_CUDA
      return make_nccl_allreducer(comm, options);
#else
      throw InputError(
          "comm.algorithm = nccl: this ringtrain was built without CUDA (rebuild with make "
          "CUDA=1); use ring, mpi or hierarchical on CPUs");
#endif
  }
  throw Error("unknown allreduce algorithm");
}

std::unique_ptr<Allreducer> make_allreducer(const Communicator& comm, Algorithm algorithm,
                                            const AllreduceOptions& options) {
  RT_REQUIRE_INPUT(options.ranks_per_node >= 0, "allreduce ranks per node must be >= 0, not ",
                   options.ranks_per_node);
  std::unique_ptr<Allreducer> reducer = make_selected(comm, algorithm, options);
#if RINGTRAIN_HAS_CUDA
  // Where GPUs are, data may be device memory (the cuda backend's tensors).
  if (algorithm != Algorithm::nccl && backend::cuda_device_count() > 0)
    reducer =
        stage_device_memory(std::move(reducer), algorithm == Algorithm::mpi && mpi_is_cuda_aware());
#endif
  return reducer;
}

}  // namespace ringtrain::comm

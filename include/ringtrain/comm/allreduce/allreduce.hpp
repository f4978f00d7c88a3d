// allreduce.hpp — the selectable allreduce: ring and rhd (ours), auto (ours, by size), mpi
// (MPI_Allreduce, the reference), hierarchical (node-local reduce, ring across node leaders,
// node-local broadcast), nccl.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/comm/allreduce/wire_format.hpp"

namespace ringtrain::comm {
class Communicator;
}

namespace ringtrain::comm::allreduce {

// ring: RingAllreduce. rhd: HalvingDoubling (recursive halving-doubling). automatic ("auto"):
// rhd or ring per call by message size and world size (AutoAllreduce, choose_automatic).
// mpi: MpiAllreduce. hierarchical: HierarchicalAllreduce. Each in its own file beside this one.
enum class Algorithm { ring, rhd, automatic, mpi, hierarchical, nccl };

// "ring", "rhd", "auto", "mpi", "hierarchical" or "nccl"; anything else throws InputError
// naming the value and the choices.
Algorithm parse_algorithm(const std::string& text);
std::string to_string(Algorithm algorithm);
// The message size ring and rhd cut a call of message_bytes into: `configured` when it is not
// 0, else 256 KiB from 16 MiB up and 1 MiB below (measured: docs/TUNING.md, "Chunk size").
size_t chunk_bytes_for(size_t configured, size_t message_bytes);

struct AllreduceOptions {
  Wire wire = Wire::fp32;      // ring, rhd, auto and hierarchical; mpi sends fp32
  size_t chunk_bytes = 0;      // fp32 bytes per pipelined ring (or rhd) message; 0: chunk_bytes_for
  int chunks_in_flight = 4;    // ring messages posted ahead in each direction
  bool post_all_ready = true;  // fp32: post every ready send at once (see run_phase)
  // ring: when every rank is on one node, calls up to 512 KiB go through a shared-memory
  // segment whose waits sleep (ShmRing) instead of polling in MPI point-to-point.
  bool shared_memory = true;
  // rhd and auto: at most this many bytes go by whole-vector recursive doubling instead of
  // halving-doubling (halving_doubling.hpp); 0 = never. 32 KiB: measured (docs/TUNING.md, "auto:
  // ring or rhd").
  size_t doubling_max_bytes = 32 << 10;
  bool validate_counts = false;  // check every rank passes the same count (one tiny allreduce)
  int ranks_per_node = 0;        // hierarchical: 0 = real nodes, N = N consecutive ranks
  // The CUDA device whose memory the data lives in (the cuda backend's gradients), or -1 for
  // host memory (the cpu and ref backends). Decides the wrapping (device_memory_path).
  int cuda_device = -1;
  // nccl: set-up, and each wait for a reduction, give up after this many seconds and abort
  // the NCCL communicator (deck: comm.stall_timeout_s); 0: no limit.
  double stall_timeout_s = 0;
};

// How make_allreducer reaches the data: host (the algorithm as it is), staged (ring, rhd, auto,
// mpi or hierarchical through pinned host buffers), cuda_aware_mpi (MPI_Allreduce handed the
// device pointers) or nccl.
enum class DevicePath { host, staged, cuda_aware_mpi, nccl };
// The path for `algorithm` on memory of cuda_device (-1: host). Only the data's device
// decides, never the GPUs a machine has: a cpu run stays on the host path with no CUDA call.
// nccl on host memory is an InputError naming comm.algorithm and train.backend.
DevicePath device_memory_path(Algorithm algorithm, int cuda_device, bool mpi_cuda_aware);

// InputError unless chunk_bytes is 0 or 4 B..1 GiB and chunks_in_flight 1..64 (ring and rhd).
void check_pipeline_options(const AllreduceOptions& options);

// rank's position in order, which must list each of the n ranks of a communicator once (an
// Error otherwise: "<what> order must list each of the n ranks once"). Ring and rhd.
int position_in_order(const std::vector<int>& order, int n, int rank, const char* what);

// In-place sum over every rank of a communicator. One call at a time per instance, from any
// one thread; every rank calls sum() with the same count, in the same order.
class Allreducer {
 public:
  virtual ~Allreducer() = default;
  virtual void sum(float* data, size_t count) = 0;
  // In-place sum over every rank divided by `divisor` (the mean, for divisor = world size),
  // rounded as sum() followed by a division; same memory contract as sum(). The default is
  // sum() and a pass of divisions on the host; ring on the fp32 wire folds the division into
  // the last add of its reduce-scatter (no extra pass over the data); nccl and staged device
  // memory divide with a kernel.
  virtual void sum_and_divide(float* data, size_t count, float divisor);
  virtual std::string name() const = 0;
  // While *hint is true the caller's process has nothing else for this core to run (the
  // fusion engine: the main thread waits in synchronize), so the allreduce may wait for its
  // peers by spinning rather than sleeping. Used by the ring over shared memory; null turns it
  // off. Set before the first call; *hint must outlive the calls.
  virtual void set_spin_hint(const std::atomic<bool>* hint) { (void)hint; }
  // The next call's data is complete on the device only once `ready_event` (an opaque
  // cudaEvent_t from Backend::ready_event, recorded on the compute stream) has fired. An
  // allreducer that reduces on a device stream makes that stream wait for it (no host wait) and
  // returns true; the default returns false, and the caller waits on the host first.
  virtual bool wait_on_device(const void* ready_event) {
    (void)ready_event;
    return false;
  }
  // The job's stall watchdog fired (called on the watchdog's thread while a call may be in
  // progress): an allreducer that waits on a device gives up (the waiting call aborts its
  // communicator and throws) and returns what it waited for and NCCL's view of why, for the
  // stall report; "" when it has nothing to add.
  virtual std::string on_stall() { return {}; }
  // Messages (or shared-memory stages) this allreducer has completed since it was made: while
  // the number moves, bytes move, and the stall watchdog does not count a long call as a stall.
  // Read on the watchdog's thread. 0 for one that cannot tell (mpi, nccl): its calls count as
  // stalled after the timeout whatever moves inside them.
  virtual uint64_t progress() const { return 0; }
  // Collective: `bytes` of host memory, in a segment every rank of the node maps, that this
  // allreducer reduces in place by reading its peers' copies (shm/shared_buckets.hpp) when a
  // call's data lies in it at the same offset on every rank (the fusion engine's buckets).
  // Null (on every rank) where it cannot: ranks on several nodes, a narrow wire, no
  // shared memory; the caller then allocates as usual. Once per instance.
  virtual std::shared_ptr<float> shared_buffers(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
};

// Collective (duplicates communicators): every rank calls it with the same arguments.
// Throws InputError on bad options, and for nccl in a build without CUDA or on a rank
// without a GPU.
//
// options.cuda_device says where the data lives (device_memory_path). nccl sums GPU memory:
// data must be device memory of options.cuda_device (the cuda backend's tensors), its values
// complete on the device before sum() (synchronise the compute stream first, or hand its event
// to wait_on_device); sum() queues the conversions, ncclAllReduce and the division on its own
// communication stream and returns when the result is in place, polling NCCL for errors
// meanwhile (an error or options.stall_timeout_s without progress aborts the communicator and
// throws an Error with NCCL's reason). Host memory, or another device's, is an Error.
// With the cuda backend, ring, rhd, auto, mpi and hierarchical take device memory too: staged
// through pinned host buffers (MPI_Allreduce gets device pointers when MPI is CUDA-aware);
// the same contract holds (values complete before sum(), result in place after). With host
// memory (cuda_device = -1) no CUDA call is made.
std::unique_ptr<Allreducer> make_allreducer(const Communicator& comm, Algorithm algorithm,
                                            const AllreduceOptions& options);

}  // namespace ringtrain::comm::allreduce

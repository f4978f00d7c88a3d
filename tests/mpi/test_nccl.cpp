// test_nccl.cpp — allreduce of GPU memory: nccl (fp32 and bf16/fp16 wires) and ring, mpi and
// hierarchical staged through pinned host buffers; exact sums at awkward counts, equal on
// every rank; nccl refuses host memory; its stream waits for the backend's ready mark; the
// stager binds the data's device on the calling thread. Needs a GPU per rank: where a rank
// sees none, every rank gets the same one-line InputError for nccl; where ranks share a GPU,
// every rank gets our error naming them; nccl on the cpu backend's host memory is an
// InputError naming the deck keys everywhere. (The NCCL set-up and wait logic
// runs here without a GPU: test_collective_setup.cpp, unit/test_device_wait.cpp.)
// np: 1 2
// quick: 2
#define BOOST_TEST_MODULE nccl
#define OMPI_SKIP_MPICXX 1
#include "allreduce_test_data.hpp"
#include "mpi_test.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/train/gpu_binding.hpp"

#if RINGTRAIN_HAS_CUDA
#include <cuda_runtime_api.h>
#endif
#include <thread>

RT_MPI_TEST_MAIN

using namespace ringtrain;

namespace {

// This rank's GPU as the trainer chooses it (from every local rank's visible bus ids, so
// a per-rank CUDA_VISIBLE_DEVICES counts), or -1 when it has none of its own. Collective.
int own_gpu(const comm::Communicator& world) {
  const backend::NodeGpus node = train::gather_node_gpus(world);
  try {
    return backend::select_local_device(node, world.local_rank(), false);
  } catch (const InputError&) {
    return -1;
  }
}

// Every rank of this node has a GPU of its own.
bool gpu_per_rank(const comm::Communicator& world) {
  return world.all_ok(own_gpu(world) >= 0);
}

// A precondition: every rank has a GPU of its own.
struct GpuPerRank {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    comm::Communicator world;
    boost::test_tools::assertion_result result(gpu_per_rank(world));
    result.message() << "needs one GPU per rank (" << backend::cuda_device_status() << ")";
    return result;
  }
};

// The upload runs on the backend's compute stream, NCCL and the stager read on their own: wait
// for it on the host (the trainer orders the streams with the ready mark instead; the last
// cases test that). Before, nothing waited: on 2+ ranks a reduction could read the old bytes.
void upload_and_wait(backend::Backend& be, const std::vector<float>& data, backend::Tensor& t) {
  be.upload(data.data(), t);
  be.synchronize();
}

}  // namespace

// A precondition: some rank sees no GPU at all. (Ranks that all see a GPU but share one are the
// case below, with its own error; "not every rank has its own GPU" made this case expect the
// no-GPU text where one GPU served two ranks.)
struct SomeRankWithoutGpu {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    comm::Communicator world;
    boost::test_tools::assertion_result result(!world.all_ok(backend::cuda_device_count() > 0));
    result.message() << "every rank sees a GPU (" << backend::cuda_device_status() << ")";
    return result;
  }
};

BOOST_AUTO_TEST_CASE(nccl_without_a_gpu_is_the_same_input_error_on_every_rank,
                     *boost::unit_test::precondition(SomeRankWithoutGpu{})) {
  comm::Communicator world;
  std::string message;
  try {
    comm::allreduce::AllreduceOptions on_gpu;
    on_gpu.cuda_device = 0;  // as the cuda backend would ask
    comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, on_gpu);
  } catch (const InputError& e) {
    message = e.what();
  }
  const std::string expected =
      !RINGTRAIN_HAS_CUDA
          ? "comm.algorithm = nccl: this ringtrain was built without CUDA (rebuild with make "
            "CUDA=1); use ring, mpi or hierarchical on CPUs"
      : backend::cuda_device_count() == 0
          ? "comm.algorithm = nccl: no GPU visible (" + backend::cuda_device_status() + ")"
          : "comm.algorithm = nccl: another rank has no GPU visible";
  if (world.rank() == 0) std::printf("nccl without a GPU: %s\n", message.c_str());
  BOOST_TEST(message == expected);
  BOOST_TEST(rt_test::all_ok(message == expected));
}

// Before: the cpu backend with comm.algorithm = nccl made an NCCL communicator on a GPU machine
// and failed in the first reduction with a host-memory Error (exit 1), or with "no GPU visible".
BOOST_AUTO_TEST_CASE(nccl_on_host_memory_is_an_input_error_naming_the_keys) {
  comm::Communicator world;
  std::string message;
  try {
    comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, {});
  } catch (const InputError& e) {
    message = e.what();
  }
  const std::string expected =
      !RINGTRAIN_HAS_CUDA
          ? "comm.algorithm = nccl: this ringtrain was built without CUDA (rebuild with make "
            "CUDA=1); use ring, mpi or hierarchical on CPUs"
          : "comm.algorithm = nccl reduces GPU memory, but the gradients of this run are in host "
            "memory: set train.backend = cuda (or comm.algorithm = ring, rhd, auto, mpi or "
            "hierarchical for the cpu backend)";
  BOOST_TEST(message == expected);
  BOOST_TEST(rt_test::all_ok(message == expected));
}

BOOST_AUTO_TEST_CASE(nccl_sums_device_memory_exactly,
                     *boost::unit_test::precondition(GpuPerRank{})) {
  comm::Communicator world;
  backend::CudaOptions options;
  options.device = own_gpu(world);
  auto be = backend::make_cuda_backend(options);
  for (comm::allreduce::Wire wire :
       {comm::allreduce::Wire::fp32, comm::allreduce::Wire::bf16, comm::allreduce::Wire::fp16}) {
    comm::allreduce::AllreduceOptions ao;
    ao.cuda_device = options.device;
    ao.wire = wire;
    ao.validate_counts = true;
    auto reducer = comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, ao);
    for (size_t count : {size_t(1), size_t(7), size_t(1000003)}) {
      std::vector<float> data = rt_test::small_int_data(world.rank(), count);
      backend::Tensor t = be->alloc({int64_t(count)});
      upload_and_wait(*be, data, t);
      reducer->sum(t.f32(), count);
      be->download(t, data.data());
      // Small integers stay exact over 16-bit wires too while sums stay below 256.
      const int64_t wrong = rt_test::first_wrong_small_int_sum(data, world.size());
      if (wrong >= 0)
        std::printf("rank %d: %s count %zu: first wrong element %lld\n", world.rank(),
                    reducer->name().c_str(), count, static_cast<long long>(wrong));
      BOOST_TEST(rt_test::all_ok(wrong < 0));
      BOOST_TEST(rt_test::all_ok(rt_test::same_bytes_as_rank0(data)));
    }
  }
}

// The fp16 wire near its limit: every rank holds 40000 (fp16's largest value is 65504), so
// from 2 ranks on the plain sum on the wire is inf. With the pre-divide by P (the power of two
// from the world size up) each rank sends 40000 / P and the mean comes back finite and exact
// (40000 / P is exact in fp16 for P <= 8). Before the pre-divide: inf on every rank.
BOOST_AUTO_TEST_CASE(nccl_fp16_wire_does_not_overflow_on_a_large_mean,
                     *boost::unit_test::precondition(GpuPerRank{})) {
  comm::Communicator world;
  if (world.size() < 2 || world.size() > 8) return;
  backend::CudaOptions options;
  options.device = own_gpu(world);
  auto be = backend::make_cuda_backend(options);
  comm::allreduce::AllreduceOptions ao;
  ao.cuda_device = options.device;
  ao.wire = comm::allreduce::Wire::fp16;
  auto reducer = comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, ao);
  const size_t count = 4099;
  std::vector<float> data(count, 40000.0f);
  backend::Tensor t = be->alloc({int64_t(count)});
  upload_and_wait(*be, data, t);
  reducer->sum_and_divide(t.f32(), count, float(world.size()));
  be->download(t, data.data());
  size_t wrong = 0;
  for (float v : data) wrong += v != 40000.0f;
  BOOST_TEST(rt_test::all_ok(wrong == 0), wrong << " of " << count << " means are not 40000");
}

// More ranks than GPUs (train.share_gpus): NCCL would fail deep in its set-up with "Duplicate
// GPU detected"; ours names both ranks, the GPU and the fix, on every rank, before NCCL starts.
BOOST_AUTO_TEST_CASE(nccl_with_two_ranks_on_one_gpu_is_our_input_error,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       comm::Communicator world;
                       const int gpus = backend::cuda_device_count();
                       boost::test_tools::assertion_result shared(gpus > 0 &&
                                                                  world.local_size() > gpus);
                       shared.message()
                           << "needs more ranks on a node than GPUs (" << world.local_size()
                           << " ranks, " << backend::cuda_device_status() << ")";
                       return shared;
                     })) {
  comm::Communicator world;
  const backend::NodeGpus node = train::gather_node_gpus(world);
  comm::allreduce::AllreduceOptions ao;
  ao.cuda_device = backend::select_local_device(node, world.local_rank(), true);
  std::string message;
  try {
    comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, ao);
  } catch (const InputError& e) {
    message = e.what();
  }
  if (world.rank() == 0) std::printf("two ranks on one GPU: %s\n", message.c_str());
  BOOST_TEST(message.rfind("comm.algorithm = nccl: ranks ", 0) == 0);
  BOOST_TEST(message.find("and NCCL runs one rank per GPU; with train.share_gpus = true use "
                          "comm.algorithm = auto or ring") != std::string::npos);
  BOOST_TEST(rt_test::all_ok(!message.empty()));
}

BOOST_AUTO_TEST_CASE(nccl_refuses_host_memory, *boost::unit_test::precondition(GpuPerRank{})) {
  comm::Communicator world;
  backend::CudaOptions options;
  options.device = own_gpu(world);
  auto be = backend::make_cuda_backend(options);
  comm::allreduce::AllreduceOptions ao;
  ao.cuda_device = options.device;
  auto reducer = comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, ao);
  std::vector<float> host(16, 1.0f);
  std::string message;
  try {
    reducer->sum(host.data(), host.size());
  } catch (const Error& e) {
    message = e.what();
  }
  BOOST_TEST(message.find("is host memory; algorithm nccl reduces GPU memory") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(host_algorithms_sum_device_memory_exactly,
                     *boost::unit_test::precondition(GpuPerRank{})) {
  comm::Communicator world;
  backend::CudaOptions options;
  options.device = own_gpu(world);
  auto be = backend::make_cuda_backend(options);
  for (auto algorithm : {comm::allreduce::Algorithm::ring, comm::allreduce::Algorithm::mpi,
                         comm::allreduce::Algorithm::hierarchical}) {
    comm::allreduce::AllreduceOptions ao;
    ao.cuda_device = options.device;
    auto reducer = comm::allreduce::make_allreducer(world, algorithm, ao);
    for (size_t count : {size_t(3), size_t(300007)}) {
      std::vector<float> data = rt_test::small_int_data(world.rank(), count);
      backend::Tensor t = be->alloc({int64_t(count)});
      upload_and_wait(*be, data, t);
      reducer->sum(t.f32(), count);
      be->download(t, data.data());
      const int64_t wrong = rt_test::first_wrong_small_int_sum(data, world.size());
      if (wrong >= 0)
        std::printf("rank %d: %s on device memory, count %zu: first wrong element %lld\n",
                    world.rank(), reducer->name().c_str(), count, static_cast<long long>(wrong));
      BOOST_TEST(rt_test::all_ok(wrong < 0));
      // Host memory still goes straight through.
      std::vector<float> host = rt_test::small_int_data(world.rank(), count);
      reducer->sum(host.data(), count);
      BOOST_TEST(rt_test::all_ok(rt_test::first_wrong_small_int_sum(host, world.size()) < 0));
    }
  }
}

// The fusion engine asks for the mean: on device memory every algorithm must divide there too
// (nccl and CUDA-aware MPI with a kernel, the staged ones on the host), to the same bits as
// the exact sum divided on the host.
BOOST_AUTO_TEST_CASE(every_algorithm_means_device_memory,
                     *boost::unit_test::precondition(GpuPerRank{})) {
  comm::Communicator world;
  backend::CudaOptions options;
  options.device = own_gpu(world);
  auto be = backend::make_cuda_backend(options);
  const float p = float(world.size());
  for (auto algorithm :
       {comm::allreduce::Algorithm::nccl, comm::allreduce::Algorithm::ring,
        comm::allreduce::Algorithm::mpi, comm::allreduce::Algorithm::hierarchical}) {
    comm::allreduce::AllreduceOptions ao;
    ao.cuda_device = options.device;
    auto reducer = comm::allreduce::make_allreducer(world, algorithm, ao);
    const size_t count = 300007;
    std::vector<float> data = rt_test::small_int_data(world.rank(), count);
    backend::Tensor t = be->alloc({int64_t(count)});
    upload_and_wait(*be, data, t);
    reducer->sum_and_divide(t.f32(), count, p);
    be->download(t, data.data());
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      int64_t sum = 0;
      for (int r = 0; r < world.size(); ++r) sum += int64_t(rt_test::small_int(r, i));
      wrong += data[i] != float(sum) / p;
    }
    BOOST_TEST(rt_test::all_ok(wrong == 0), reducer->name() << ": " << wrong << " wrong means");
  }
}

// Stream-event dependency instead of a host wait: the data is written by a kernel still queued
// on the compute stream when sum() is called, and only the backend's ready mark orders NCCL's
// stream after it. Before, nothing used the mark (wait_on_device did not exist): the engine
// waited on the host with cudaEventSynchronize, then two stream syncs per bucket; a reducer
// that skipped the wait would read the old zeros here.
BOOST_AUTO_TEST_CASE(nccl_orders_its_stream_after_the_ready_mark,
                     *boost::unit_test::precondition(GpuPerRank{})) {
  comm::Communicator world;
  backend::CudaOptions options;
  options.device = own_gpu(world);
  auto be = backend::make_cuda_backend(options);
  comm::allreduce::AllreduceOptions ao;
  ao.cuda_device = options.device;
  auto reducer = comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::nccl, ao);
  const size_t count = 1 << 22;  // large enough that the fill is still running at sum()
  backend::Tensor t = be->alloc({int64_t(count)});
  be->fill(t, 0.0f);
  be->synchronize();
  be->fill(t, float(world.rank() + 1));  // queued, not waited for
  be->record_ready(0);
  BOOST_TEST(reducer->wait_on_device(be->ready_mark(0)));
  reducer->sum_and_divide(t.f32(), count, 2.0f);
  std::vector<float> host(count);
  be->download(t, host.data());
  const float expected = float(world.size() * (world.size() + 1) / 2) / 2.0f;
  size_t wrong = 0;
  for (float v : host) wrong += v != expected;
  BOOST_TEST(rt_test::all_ok(wrong == 0), wrong << " wrong of " << count);
}

#if RINGTRAIN_HAS_CUDA
// The stager binds the data's device on the thread that calls it (the fusion engine's comm
// thread). Before, it never called cudaSetDevice: on a rank bound to GPU 1 the comm thread ran
// on device 0 and made a context there. Needs two GPUs on the rank to tell the devices apart.
BOOST_AUTO_TEST_CASE(the_stager_binds_the_datas_device_on_the_calling_thread,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       boost::test_tools::assertion_result two(backend::cuda_device_count() >= 2 &&
                                                               rt_test::world_size() == 1);
                       two.message()
                           << "needs 2 GPUs and 1 rank (" << backend::cuda_device_status() << ")";
                       return two;
                     })) {
  comm::Communicator world;
  backend::CudaOptions options;
  options.device = 1;
  auto be = backend::make_cuda_backend(options);
  comm::allreduce::AllreduceOptions ao;
  ao.cuda_device = 1;
  auto reducer = comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::ring, ao);
  backend::Tensor t = be->alloc({16});
  be->fill(t, 3.0f);
  be->synchronize();
  int device_on_thread = -1;
  std::thread([&] {
    reducer->sum(t.f32(), 16);
    cudaGetDevice(&device_on_thread);
  }).join();
  BOOST_TEST(device_on_thread == 1);
}
#endif  // RINGTRAIN_HAS_CUDA

// test_cuda_backend.cpp — GPU discovery without a GPU, the exact errors of asking for CUDA
// where it cannot run, device binding, the pool's size classes; and, where a GPU is, the
// pool's reuse and our conversion, packing and finite-check kernels.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "../../src/backend/algorithm_choice.hpp"
#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/core/error.hpp"

#if RINGTRAIN_HAS_CUDA
#include "../../src/backend/cuda/kernels.hpp"
#include "../../src/backend/cuda/memory_pool.hpp"
#endif

using namespace ringtrain;
using namespace ringtrain::backend;

namespace {

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

struct GpuPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result result(rt_test::cuda_testable());
    result.message() << "needs a GPU (" << cuda_device_status() << ")";
    return result;
  }
};

struct NoGpu {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result result(!rt_test::cuda_testable());
    result.message() << "a GPU is visible: the CUDA backend runs the op tests instead";
    return result;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_backend)

BOOST_AUTO_TEST_CASE(no_gpu_is_zero_devices_not_a_crash, *boost::unit_test::precondition(NoGpu())) {
  std::printf("cuda_device_count() = %d (%s)\n", cuda_device_count(), cuda_device_status().c_str());
  BOOST_TEST(cuda_device_count() == 0);
  BOOST_TEST(cuda_device_count() == 0);  // probed once, the same answer again
  const std::string status = cuda_device_status();
  if (RINGTRAIN_HAS_CUDA)
    BOOST_TEST(status.rfind("cudaGetDeviceCount: ", 0) == 0, status);
  else
    BOOST_TEST(status == "built without CUDA");
}

BOOST_AUTO_TEST_CASE(asking_for_cuda_without_a_gpu_is_an_input_error,
                     *boost::unit_test::precondition(NoGpu())) {
  const std::string expected =
      RINGTRAIN_HAS_CUDA
          ? "train.backend = cuda: no GPU visible (" + cuda_device_status() + ")"
          : "train.backend = cuda: this ringtrain was built without CUDA (rebuild with make "
            "CUDA=1)";
  BOOST_TEST(input_error_of([] { make_backend("cuda", 1); }) == expected);
  BOOST_TEST(input_error_of([] { make_cuda_backend(CudaOptions{}); }) == expected);
}

BOOST_AUTO_TEST_CASE(local_rank_to_gpu) {
  BOOST_TEST(select_local_device(0, 2, 2, false) == 0);
  BOOST_TEST(select_local_device(1, 2, 4, false) == 1);
  BOOST_TEST(select_local_device(3, 4, 2, true) == 1);
  BOOST_TEST(select_local_device(2, 3, 1, true) == 0);
  BOOST_TEST(input_error_of([] { select_local_device(2, 4, 2, false); }) ==
             "train.backend = cuda: 4 ranks on this node but only 2 GPU(s); launch at most 2 "
             "ranks per node or allow ranks to share GPUs in the deck");
  BOOST_TEST(input_error_of([] { select_local_device(0, 1, 0, true); }) ==
             "train.backend = cuda: no GPU on this node for local rank 0");
  BOOST_CHECK_THROW(select_local_device(2, 2, 2, false), Error);
}

// The rule applied to cudnnFind*'s measured list. Before: the first algorithm of the
// heuristics' list that was deterministic, else the first at all, so train.deterministic had
// nothing to hold on to (a non-deterministic fallback was taken silently) and a faster
// non-deterministic algorithm was passed over when determinism was not asked for.
BOOST_AUTO_TEST_CASE(algorithm_choice_filters_a_measured_list) {
  const size_t mib = size_t(1) << 20;
  // algo, succeeded, ms, memory, deterministic
  const std::vector<AlgorithmTrial> trials = {
      {7, true, 0.5f, 512 * mib, true},  // fastest, but needs 512 MiB
      {6, false, 0.6f, 0, true},         // failed on this shape
      {1, true, 0.8f, 64 * mib, false},  // fastest that fits; not deterministic
      {0, true, 1.2f, 0, true},          // deterministic, no workspace
      {2, true, 0.9f, 300 * mib, true},  // deterministic, above 256 MiB
  };
  BOOST_TEST(trials[choose_algorithm(trials, 256, false, "forward algorithm")].algo == 1);
  BOOST_TEST(trials[choose_algorithm(trials, 256, true, "forward algorithm")].algo == 0);
  BOOST_TEST(trials[choose_algorithm(trials, 512, true, "forward algorithm")].algo == 7);
  BOOST_TEST(trials[choose_algorithm(trials, 400, true, "forward algorithm")].algo == 2);
  // Not sorted by time: still the fastest allowed.
  const std::vector<AlgorithmTrial> unsorted = {{3, true, 2.0f, 0, false},
                                                {4, true, 1.0f, 0, false}};
  BOOST_TEST(unsorted[choose_algorithm(unsorted, 1, false, "x")].algo == 4);
  const std::vector<AlgorithmTrial> only_fast = {{1, true, 0.1f, 0, false},
                                                 {5, true, 0.2f, 8 * mib, true}};
  BOOST_TEST(input_error_of([&] {
               choose_algorithm(only_fast, 4, true,
                                "backward-filter algorithm for input [8,3,32,32]");
             }) ==
             "cuDNN has no deterministic backward-filter algorithm for input [8,3,32,32] "
             "within train.cudnn_workspace_mib = 4; raise train.cudnn_workspace_mib or set "
             "train.deterministic = false");
  BOOST_TEST(input_error_of([&] {
               choose_algorithm({{1, false, 0.1f, 0, true}}, 4, false,
                                "forward algorithm for input [1,1,1,1]");
             }) ==
             "cuDNN has no forward algorithm for input [1,1,1,1] within "
             "train.cudnn_workspace_mib = 4; raise train.cudnn_workspace_mib");
}

#if RINGTRAIN_HAS_CUDA

BOOST_AUTO_TEST_CASE(pool_size_classes) {
  const size_t mib = size_t(1) << 20;
  BOOST_TEST(cuda::DevicePool::size_class(0) == 512u);
  BOOST_TEST(cuda::DevicePool::size_class(1) == 512u);
  BOOST_TEST(cuda::DevicePool::size_class(512) == 512u);
  BOOST_TEST(cuda::DevicePool::size_class(513) == 1024u);
  BOOST_TEST(cuda::DevicePool::size_class(300000) == 512u * 1024);
  BOOST_TEST(cuda::DevicePool::size_class(mib) == mib);
  BOOST_TEST(cuda::DevicePool::size_class(mib + 1) == 2 * mib);
  BOOST_TEST(cuda::DevicePool::size_class(3 * mib) == 4 * mib);
  BOOST_TEST(cuda::DevicePool::size_class(4 * mib) == 4 * mib);
}

BOOST_AUTO_TEST_CASE(pool_reuses_blocks, *boost::unit_test::precondition(GpuPresent())) {
  auto pool = cuda::DevicePool::create(0, true);  // caching, whatever RINGTRAIN_CUDA_POOL says
  void* first = pool->allocate(1000).get();       // given back at once
  BOOST_TEST(pool->device_allocations() == 1u);
  auto again = pool->allocate(900);  // the same 1 KiB class: no cudaMalloc
  BOOST_TEST(again.get() == first);
  BOOST_TEST(pool->device_allocations() == 1u);
  auto other = pool->allocate(5000);
  BOOST_TEST(pool->device_allocations() == 2u);
  BOOST_TEST(pool->bytes_in_use() == 1024u + 8192u);
}

namespace {

std::vector<float> device_round_trip(const std::vector<float>& in, bool bf16) {
  auto pool = cuda::DevicePool::create(0);
  const int64_t n = int64_t(in.size());
  auto f = pool->allocate(in.size() * sizeof(float));
  auto h = pool->allocate(in.size() * sizeof(uint16_t));
  auto* fd = static_cast<float*>(f.get());
  auto* hd = static_cast<uint16_t*>(h.get());
  BOOST_REQUIRE(cudaMemcpy(fd, in.data(), n * sizeof(float), cudaMemcpyHostToDevice) == 0);
  if (bf16) {
    cuda::kernels::f32_to_bf16(fd, hd, n, nullptr);
    cuda::kernels::bf16_to_f32(hd, fd, n, nullptr);
  } else {
    cuda::kernels::f32_to_f16(fd, hd, n, nullptr);
    cuda::kernels::f16_to_f32(hd, fd, n, nullptr);
  }
  std::vector<float> out(in.size());
  BOOST_REQUIRE(cudaMemcpy(out.data(), fd, n * sizeof(float), cudaMemcpyDeviceToHost) == 0);
  return out;
}

// Round to nearest even at `mantissa` explicit bits, for normal numbers (the reference).
float round_to_bits(float x, int mantissa) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const int drop = 23 - mantissa;
  const uint32_t half = 1u << (drop - 1), lsb = (u >> drop) & 1u;
  u = (u + half - 1 + lsb) & ~((1u << drop) - 1);
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE(bf16_and_fp16_round_to_nearest_even,
                     *boost::unit_test::precondition(GpuPresent())) {
  std::vector<float> in = rt_test::random_values(4096, 7, -100.0f, 100.0f);
  in.push_back(1.0f + std::ldexp(1.0f, -8));   // a bf16 tie: rounds to even (1.0)
  in.push_back(1.0f + std::ldexp(1.0f, -11));  // an fp16 tie: rounds to even (1.0)
  std::vector<float> b = device_round_trip(in, true), h = device_round_trip(in, false);
  size_t wrong_b = 0, wrong_h = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    wrong_b += b[i] != round_to_bits(in[i], 7);
    if (std::fabs(in[i]) >= std::ldexp(1.0f, -14)) wrong_h += h[i] != round_to_bits(in[i], 10);
  }
  BOOST_TEST(wrong_b == 0u);
  BOOST_TEST(wrong_h == 0u);
}

BOOST_AUTO_TEST_CASE(segments_pack_and_finite_flag, *boost::unit_test::precondition(GpuPresent())) {
  auto pool = cuda::DevicePool::create(0);
  // Three tensors of awkward sizes packed into one fusion buffer, scaled by 1/2.
  const int64_t sizes[3] = {5, 1000, 3};
  std::vector<float> host;
  std::vector<std::shared_ptr<void>> tensors;
  auto buffer = pool->allocate(1008 * sizeof(float));
  std::vector<cuda::kernels::Segment> segs;
  int64_t offset = 0;
  for (int t = 0; t < 3; ++t) {
    std::vector<float> v = rt_test::random_values(size_t(sizes[t]), 100 + t);
    tensors.push_back(pool->allocate(v.size() * sizeof(float)));
    BOOST_REQUIRE(
        cudaMemcpy(tensors.back().get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice) == 0);
    segs.push_back({static_cast<const float*>(tensors.back().get()),
                    static_cast<float*>(buffer.get()) + offset, sizes[t]});
    host.insert(host.end(), v.begin(), v.end());
    offset += sizes[t];
  }
  auto table = pool->allocate(segs.size() * sizeof(segs[0]));
  BOOST_REQUIRE(cudaMemcpy(table.get(), segs.data(), segs.size() * sizeof(segs[0]),
                           cudaMemcpyHostToDevice) == 0);
  cuda::kernels::copy_segments(static_cast<cuda::kernels::Segment*>(table.get()), 3, 1000, 0.5f,
                               nullptr);
  std::vector<float> packed(1008);
  BOOST_REQUIRE(cudaMemcpy(packed.data(), buffer.get(), 1008 * 4, cudaMemcpyDeviceToHost) == 0);
  for (float& v : host) v *= 0.5f;
  BOOST_TEST(packed == host, boost::test_tools::per_element());

  auto flag = pool->allocate(sizeof(int32_t));
  int32_t flags[2] = {0, 0};
  for (int poisoned = 0; poisoned < 2; ++poisoned) {
    if (poisoned) {
      const float inf = std::numeric_limits<float>::infinity();
      BOOST_REQUIRE(cudaMemcpy(static_cast<float*>(buffer.get()) + 700, &inf, 4,
                               cudaMemcpyHostToDevice) == 0);
    }
    BOOST_REQUIRE(cudaMemset(flag.get(), 0, 4) == 0);
    cuda::kernels::flag_nonfinite(static_cast<float*>(buffer.get()), 1008,
                                  static_cast<int32_t*>(flag.get()), nullptr);
    BOOST_REQUIRE(cudaMemcpy(&flags[poisoned], flag.get(), 4, cudaMemcpyDeviceToHost) == 0);
  }
  BOOST_TEST(flags[0] == 0);
  BOOST_TEST(flags[1] == 1);
}

#endif  // RINGTRAIN_HAS_CUDA

BOOST_AUTO_TEST_SUITE_END()

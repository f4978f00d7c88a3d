// test_cuda_backend.cpp — GPU discovery without a GPU, the exact errors of asking for CUDA
// where it cannot run, device binding, the pool's size classes; and, where a GPU is, the
// pool's reuse and our conversion, packing and finite-check kernels.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../../src/backend/algorithm_choice.hpp"
#include "../../src/backend/cuda/column_sum_plan.hpp"  // host arithmetic: in every build
#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/backend/memory_ledger.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/core/error.hpp"

#if RINGTRAIN_HAS_CUDA
#include "../../src/backend/cuda/context.hpp"
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

// The grid of the bias-gradient column sums (a kernel launch with this plan runs only on a
// GPU): every row in exactly one chunk, no empty chunk, at most kMaxChunks of them (the
// second pass adds that many per column), lanes that divide a chunk evenly, and tiles that
// cover every column. Shapes: tiny, a linear's [64, 10], conv dy [N*H*W, C] of 8x32x32x64,
// 256x32x32x64 and 512x56x56x64, and row counts that do not divide evenly.
BOOST_AUTO_TEST_CASE(column_sum_plan_covers_every_row_once) {
  using cuda::ColumnSumPlan;
  const int64_t shapes[][2] = {{0, 5},        {1, 1},       {64, 10},     {969, 40},
                               {8192, 64},    {65537, 33},  {262144, 64}, {1605632, 64},
                               {256, 100000}, {12345679, 3}};
  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], cols = shape[1];
    const ColumnSumPlan p = cuda::column_sum_plan(rows, cols);
    BOOST_TEST_CONTEXT("rows " << rows << " cols " << cols << ": tiles " << p.tiles << " chunks "
                               << p.chunks << " x " << p.rows_per_chunk) {
      BOOST_TEST(p.tiles * ColumnSumPlan::kTileCols >= cols);
      BOOST_TEST((p.tiles - 1) * ColumnSumPlan::kTileCols < cols);
      BOOST_TEST(p.rows_per_chunk % ColumnSumPlan::kRowLanes == 0);
      BOOST_TEST(p.chunks >= 1);
      BOOST_TEST(p.chunks <= ColumnSumPlan::kMaxChunks);
      BOOST_TEST(p.chunks * p.rows_per_chunk >= rows);
      if (rows > 0) BOOST_TEST((p.chunks - 1) * p.rows_per_chunk < rows);
      BOOST_TEST(p.scratch_floats == p.chunks * cols);
    }
  }
  // Enough blocks to fill a GPU for the conv shapes: 256x32x32 rows of 64 channels.
  const ColumnSumPlan big = cuda::column_sum_plan(262144, 64);
  BOOST_TEST(big.tiles * big.chunks >= 256);
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
  // Above 1 MiB: quarters of the power of two below, in whole 2 MiB granules.
  BOOST_TEST(cuda::DevicePool::size_class(5 * mib) == 6 * mib);
  BOOST_TEST(cuda::DevicePool::size_class(90 * mib) == 96 * mib);
  BOOST_TEST(cuda::DevicePool::size_class(100 * mib) == 112 * mib);
  BOOST_TEST(cuda::DevicePool::size_class(128 * mib) == 128 * mib);
}

namespace {

// Device memory on the host: numbered fake blocks, a capacity, and a log of the calls.
class FakeMemory : public cuda::DeviceMemory {
 public:
  struct State {
    size_t capacity = size_t(1) << 40, used = 0;
    std::map<void*, size_t> live;
    std::vector<std::string> log;  // "malloc 1024", "free 1024", "sync"
    uintptr_t next = 0x1000;
  };
  explicit FakeMemory(std::shared_ptr<State> state) : s_(std::move(state)) {}
  void* allocate(size_t bytes) override {
    if (s_->used + bytes > s_->capacity) {
      s_->log.push_back("oom " + std::to_string(bytes));
      return nullptr;
    }
    void* block = reinterpret_cast<void*>(s_->next);
    s_->next += bytes;
    s_->used += bytes;
    s_->live[block] = bytes;
    s_->log.push_back("malloc " + std::to_string(bytes));
    return block;
  }
  void free(void* block) noexcept override {
    s_->used -= s_->live.at(block);
    s_->log.push_back("free " + std::to_string(s_->live.at(block)));
    s_->live.erase(block);
  }
  void synchronize() noexcept override { s_->log.push_back("sync"); }

 private:
  std::shared_ptr<State> s_;
};

struct FakePool {
  explicit FakePool(bool caching = true)
      : state(std::make_shared<FakeMemory::State>()),
        pool(cuda::DevicePool::create(std::make_unique<FakeMemory>(state), caching)) {}
  std::shared_ptr<FakeMemory::State> state;
  std::shared_ptr<cuda::DevicePool> pool;
};

constexpr size_t kMiB = size_t(1) << 20;

}  // namespace

// Host-side bookkeeping of the pool, on fake device memory (runs without a GPU).
BOOST_AUTO_TEST_CASE(pool_reuses_a_block_of_the_same_class) {
  FakePool f;
  void* first = f.pool->allocate(1000).get();  // given back at once
  auto again = f.pool->allocate(900);
  BOOST_TEST(again.get() == first);
  BOOST_TEST(f.pool->device_allocations() == 1u);
  BOOST_TEST(f.pool->bytes_in_use() == 1024u);
}

// Exact-size lists kept a 100 MiB block idle while a 90 MiB request allocated anew (and the
// cache grew with every shape a run met); best fit serves it from the nearest larger block.
BOOST_AUTO_TEST_CASE(pool_serves_a_request_from_the_smallest_larger_block) {
  FakePool f;
  {
    auto a = f.pool->allocate(100 * kMiB), b = f.pool->allocate(91 * kMiB);
    auto c = f.pool->allocate(300 * kMiB);
  }
  BOOST_TEST(f.pool->device_allocations() == 3u);
  BOOST_TEST(f.pool->bytes_cached() == (112 + 96 + 320) * kMiB);
  auto got = f.pool->allocate(90 * kMiB);  // class 96 MiB: the 96 MiB block, not the 112
  BOOST_TEST(f.state->live.at(got.get()) == 96 * kMiB);
  auto next = f.pool->allocate(90 * kMiB);  // then the 112 MiB one (at most 1.5 x 96)
  BOOST_TEST(f.state->live.at(next.get()) == 112 * kMiB);
  BOOST_TEST(f.pool->device_allocations() == 3u);
  // 320 MiB is more than half as large again as 96 MiB: a new block rather than that waste.
  auto third = f.pool->allocate(90 * kMiB);
  BOOST_TEST(f.pool->device_allocations() == 4u);
  BOOST_TEST(f.pool->bytes_in_use() == (96 + 112 + 96) * kMiB);
  BOOST_TEST(f.pool->bytes_cached() == 320 * kMiB);
}

// The benchmark's GPU memory column: the most in use at once, not what is in use at the end
// nor what the cache holds.
BOOST_AUTO_TEST_CASE(pool_peak_is_the_most_in_use_at_once) {
  FakePool f;
  BOOST_TEST(f.pool->peak_bytes_in_use() == 0u);
  {
    auto a = f.pool->allocate(3 * kMiB), b = f.pool->allocate(5 * kMiB);  // 4 + 6 MiB classes
    BOOST_TEST(f.pool->peak_bytes_in_use() == 10 * kMiB);
  }
  auto c = f.pool->allocate(900);  // 1 KiB, once the 10 MiB are given back
  BOOST_TEST(f.pool->bytes_in_use() == 1024u);
  BOOST_TEST(f.pool->bytes_cached() == 10 * kMiB);
  BOOST_TEST(f.pool->peak_bytes_in_use() == 10 * kMiB);
  auto d = f.pool->allocate(12 * kMiB), e = f.pool->allocate(12 * kMiB);
  BOOST_TEST(f.pool->peak_bytes_in_use() == 1024u + 2 * 12 * kMiB);
}

// The bench's column beside torch.cuda.max_memory_allocated: bytes asked for (512-byte
// granules), not the blocks that served them; reset_peak starts both peaks from what is in use.
BOOST_AUTO_TEST_CASE(pool_counts_requested_bytes_beside_blocks_and_resets_both_peaks) {
  FakePool f;
  auto a = f.pool->allocate(3 * kMiB), b = f.pool->allocate(5 * kMiB + 1);  // 4 + 6 MiB classes
  BOOST_TEST(f.pool->bytes_requested_in_use() == 8 * kMiB + 512);
  BOOST_TEST(f.pool->peak_bytes_requested() == 8 * kMiB + 512);
  BOOST_TEST(f.pool->peak_bytes_in_use() == 10 * kMiB);
  b.reset();
  f.pool->reset_peak();
  BOOST_TEST(f.pool->peak_bytes_requested() == 3 * kMiB);
  BOOST_TEST(f.pool->peak_bytes_in_use() == 4 * kMiB);
  auto c = f.pool->allocate(5 * kMiB);  // the cached 6 MiB block serves it
  BOOST_TEST(f.pool->device_allocations() == 2u);
  BOOST_TEST(f.pool->peak_bytes_requested() == 8 * kMiB);
  BOOST_TEST(f.pool->peak_bytes_in_use() == 10 * kMiB);
  a.reset();
  c.reset();
  BOOST_TEST(f.pool->bytes_requested_in_use() == 0u);
  BOOST_TEST(f.pool->peak_bytes_requested() == 8 * kMiB);
}

// rt-bench-compute --memory-map: each request is booked under the tag its thread had when it
// was made (the op kind running, the workspace, or none), and the split kept is the one of the
// moment the requested bytes peaked, whatever is given back or taken after.
BOOST_AUTO_TEST_CASE(pool_splits_its_requested_peak_by_the_tag_each_request_was_made_under) {
  FakePool f;
  const auto conv = size_t(backend::OpKind::kConvForward);
  const auto norm = size_t(backend::OpKind::kBatchNormForward);
  const auto ws = size_t(backend::kWorkspaceTag), outside = size_t(backend::kOutsideOpsTag);
  auto state = f.pool->allocate(kMiB + 1);  // no scope: outside ops, 1 MiB + 512
  std::shared_ptr<void> y, workspace, z;
  {
    const backend::MemoryTagScope op{int(conv)};
    y = f.pool->allocate(3 * kMiB);
    {
      const backend::MemoryTagScope inner(backend::kWorkspaceTag);
      workspace = f.pool->allocate(5 * kMiB);
    }
    z = f.pool->allocate(100);  // the op's tag again once the workspace's scope ended
  }
  workspace.reset();  // after the peak: the split keeps it
  {
    const backend::MemoryTagScope op{int(norm)};
    auto below = f.pool->allocate(4 * kMiB);  // 1 MiB short of the peak: no new split
  }
  const backend::MemoryByTag split = f.pool->requested_at_peak();
  BOOST_TEST(f.pool->peak_bytes_requested() == 9 * kMiB + 1024);
  BOOST_TEST(split.bytes[conv] == 3 * kMiB + 512);
  BOOST_TEST(split.blocks[conv] == 2u);
  BOOST_TEST(split.bytes[ws] == 5 * kMiB);
  BOOST_TEST(split.bytes[outside] == kMiB + 512);
  BOOST_TEST(split.bytes[norm] == 0u);
  BOOST_TEST(split.total_bytes() == f.pool->peak_bytes_requested());
  // From what is in use now: the batch norm's block, taken again, makes the new peak.
  f.pool->reset_peak();
  {
    const backend::MemoryTagScope op{int(norm)};
    auto again = f.pool->allocate(4 * kMiB);
  }
  const backend::MemoryByTag after = f.pool->requested_at_peak();
  BOOST_TEST(after.bytes[norm] == 4 * kMiB);
  BOOST_TEST(after.bytes[ws] == 0u);
  BOOST_TEST(after.total_bytes() == 8 * kMiB + 1024);
}

BOOST_AUTO_TEST_CASE(pool_out_of_memory_frees_its_cache_and_retries) {
  FakePool f;
  f.state->capacity = 200 * kMiB;
  { auto a = f.pool->allocate(128 * kMiB); }  // cached, 128 MiB of the 200 held
  auto b = f.pool->allocate(64 * kMiB);       // fits beside it
  f.state->log.clear();
  auto c = f.pool->allocate(80 * kMiB);  // the 128 MiB block is too large to serve it
  BOOST_TEST(f.state->log == std::vector<std::string>(
                                 {"oom 83886080", "sync", "free 134217728", "malloc 83886080"}),
             boost::test_tools::per_element());
  BOOST_TEST(f.pool->bytes_cached() == 0u);
  // Nothing left to free: an Error saying what was asked, not a null block.
  try {
    f.pool->allocate(100 * kMiB);
    BOOST_FAIL("no throw");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("cuda backend: out of device memory for 117440512 "
                                          "bytes (150994944 in use, 0 cached bytes freed "
                                          "first)") != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(pool_without_caching_frees_at_once_and_waits_before_freeing_its_cache) {
  FakePool off(false);
  { auto a = off.pool->allocate(1000); }
  BOOST_TEST(off.state->log == std::vector<std::string>({"malloc 1024", "free 1024"}),
             boost::test_tools::per_element());
  FakePool on(true);
  { auto a = on.pool->allocate(1000), b = on.pool->allocate(3000); }
  on.pool->release_cached();
  BOOST_TEST(on.state->log == std::vector<std::string>(
                                  {"malloc 1024", "malloc 4096", "sync", "free 1024", "free 4096"}),
             boost::test_tools::per_element());
  on.pool->release_cached();  // nothing cached: no wait for the device
  BOOST_TEST(on.state->log.size() == 5u);
}

// A recorded graph's memory (DevicePool::recording): blocks the recording gave back it takes
// again itself, nothing else takes them while its handle lives (a replay writes them with no
// host code in between), and they return to the cache once the handle goes.
BOOST_AUTO_TEST_CASE(pool_keeps_a_recordings_blocks_until_its_handle_goes) {
  FakePool f;
  auto before = f.pool->allocate(1000);  // taken before, given back while recording
  void* before_block = before.get();
  void* inside_block = nullptr;
  std::shared_ptr<void> kept;  // taken while recording, kept after it
  std::shared_ptr<void> graph = f.pool->recording([&] {
    before.reset();
    auto again = f.pool->allocate(900);  // the recording's own block, taken again
    BOOST_TEST(again.get() == before_block);
    again.reset();
    kept = f.pool->allocate(5000);
    inside_block = kept.get();
  });
  BOOST_TEST(f.pool->device_allocations() == 2u);
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 1024u);
  BOOST_TEST(f.pool->bytes_cached() == 0u);
  auto other = f.pool->allocate(1000);  // not the recording's block: a new one
  BOOST_TEST(other.get() != before_block);
  kept.reset();  // given back after the recording: still its own
  auto other_large = f.pool->allocate(5000);
  BOOST_TEST(other_large.get() != inside_block);
  BOOST_TEST(f.pool->device_allocations() == 4u);
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 1024u + 8192u);
  f.pool->release_cached();  // frees nothing of the recording's
  BOOST_TEST(f.state->live.count(before_block) == 1u);
  BOOST_TEST(f.state->live.count(inside_block) == 1u);
  graph.reset();  // the recording's blocks are the cache's now
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 0u);
  BOOST_TEST(f.pool->bytes_cached() == 1024u + 8192u);
  BOOST_TEST(f.pool->allocate(1000).get() == before_block);
  BOOST_TEST(f.pool->allocate(5000).get() == inside_block);
}

// A recording that throws recorded nothing: its blocks go back to the cache at once. Without
// caching (RINGTRAIN_CUDA_POOL=off) a recording's blocks are freed only when its handle goes.
BOOST_AUTO_TEST_CASE(pool_recording_that_throws_or_runs_without_caching) {
  FakePool f;
  void* block = nullptr;
  BOOST_CHECK_THROW(f.pool->recording([&] {
    block = f.pool->allocate(1000).get();
    throw Error("capture refused");
  }),
                    Error);
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 0u);
  BOOST_TEST(f.pool->allocate(1000).get() == block);
  BOOST_CHECK_THROW(f.pool->recording([&] { f.pool->recording([] {}); }), Error);

  FakePool off(false);
  auto graph = off.pool->recording([&] { off.pool->allocate(1000); });
  BOOST_TEST(off.state->log == std::vector<std::string>({"malloc 1024"}),
             boost::test_tools::per_element());
  graph.reset();
  BOOST_TEST(off.state->log == std::vector<std::string>({"malloc 1024", "free 1024"}),
             boost::test_tools::per_element());
}

// A block taken before a recording ended (an op's scratch, the cuDNN workspace) may be one its
// replays write; given back while the recording's handle lives (an eager step outgrew it), it
// is held until no live recording that ended after it was taken remains. Blocks taken later
// are the cache's as before. Without caching, a held block is freed only then.
BOOST_AUTO_TEST_CASE(pool_holds_older_blocks_while_a_recording_may_address_them) {
  FakePool f;
  auto old = f.pool->allocate(1000);  // before both recordings
  void* old_block = old.get();
  auto first = f.pool->recording([] {});
  auto between = f.pool->allocate(3000);  // after the first, before the second
  void* between_block = between.get();
  auto second = f.pool->recording([] {});
  auto young = f.pool->allocate(20000);  // after both
  void* young_block = young.get();
  old.reset();
  between.reset();
  young.reset();
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 1024u + 4096u);
  BOOST_TEST(f.pool->bytes_cached() == 32768u);
  auto other_small = f.pool->allocate(1000), other_mid = f.pool->allocate(3000);
  BOOST_TEST(other_small.get() != old_block);
  BOOST_TEST(other_mid.get() != between_block);
  BOOST_TEST(f.pool->allocate(20000).get() == young_block);
  f.pool->release_cached();  // frees nothing held
  BOOST_TEST(f.state->live.count(old_block) == 1u);
  second.reset();  // the first may still address the oldest block, no one the middle one
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 1024u);
  BOOST_TEST(f.pool->allocate(3000).get() == between_block);
  BOOST_TEST(f.pool->allocate(1000).get() != old_block);  // a new block, given back at once
  first.reset();
  BOOST_TEST(f.pool->bytes_kept_for_recordings() == 0u);
  auto a = f.pool->allocate(1000), b = f.pool->allocate(1000);  // the two cached 1 KiB blocks
  BOOST_TEST((a.get() == old_block || b.get() == old_block));

  FakePool off(false);
  auto scratch = off.pool->allocate(1000);
  auto graph = off.pool->recording([] {});
  scratch.reset();
  BOOST_TEST(off.state->log == std::vector<std::string>({"malloc 1024"}),
             boost::test_tools::per_element());
  graph.reset();
  BOOST_TEST(off.state->log == std::vector<std::string>({"malloc 1024", "free 1024"}),
             boost::test_tools::per_element());
}

// Out of device memory while recording: a plain error naming the recording, not the capture's
// "invalidated" (freeing the cache would wait for the device, which a capture forbids).
BOOST_AUTO_TEST_CASE(pool_out_of_memory_while_recording_says_so) {
  FakePool f;
  f.state->capacity = 100 * kMiB;
  f.pool->allocate(60 * kMiB);  // given back at once: cached
  std::string error = "(no Error)";
  try {
    f.pool->recording([&] { f.pool->allocate(80 * kMiB); });
  } catch (const Error& e) {
    error = e.what();
  }
  BOOST_TEST(error.find("cuda backend: out of device memory for 83886080 bytes while recording "
                        "a CUDA graph") != std::string::npos,
             error);
  BOOST_TEST(f.pool->bytes_cached() == 64 * kMiB);  // nothing freed: no device wait
}

BOOST_AUTO_TEST_CASE(pool_reuses_blocks, *boost::unit_test::precondition(rt_test::GpuPresent())) {
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

// The cuDNN workspace counts in the memory peak only while a call holds it (PyTorch's allocator
// hands each call its own), unless RINGTRAIN_CUDA_WORKSPACE=kept holds the largest block for
// the context's life; anything else is refused, naming the variable.
BOOST_AUTO_TEST_CASE(workspace_is_held_only_by_its_call_unless_kept,
                     *boost::unit_test::precondition(rt_test::GpuPresent())) {
  const size_t mib = size_t(1) << 20;
  for (const bool kept : {false, true}) {
    BOOST_TEST_CONTEXT("kept " << kept) {
      if (kept) setenv("RINGTRAIN_CUDA_WORKSPACE", "kept", 1);
      cuda::Context ctx(CudaOptions{});
      unsetenv("RINGTRAIN_CUDA_WORKSPACE");
      const size_t before = ctx.pool().bytes_requested_in_use();
      ctx.pool().reset_peak();
      BOOST_TEST(ctx.workspace(0) == nullptr);
      {
        const backend::MemoryTagScope op{int(backend::OpKind::kConvForward)};
        const std::shared_ptr<void> ws = ctx.workspace(3 * mib);
        BOOST_TEST(ws != nullptr);
        BOOST_TEST(ctx.pool().bytes_requested_in_use() == before + 3 * mib);
      }
      BOOST_TEST(ctx.pool().bytes_requested_in_use() == before + (kept ? 3 * mib : 0));
      { const std::shared_ptr<void> smaller = ctx.workspace(mib); }
      BOOST_TEST(ctx.pool().bytes_requested_in_use() == before + (kept ? 3 * mib : 0));
      BOOST_TEST(ctx.workspace_peak() == 3 * mib);
      // Booked as the workspace even inside an op's scope: --memory-map names it apart.
      BOOST_TEST(ctx.pool().requested_at_peak().bytes[size_t(backend::kWorkspaceTag)] == 3 * mib);
      ctx.reset_workspace_peak();
      BOOST_TEST(ctx.workspace_peak() == 0u);
    }
  }
  setenv("RINGTRAIN_CUDA_WORKSPACE", "keep", 1);
  const std::string refusal = input_error_of([] { cuda::Context ctx(CudaOptions{}); });
  unsetenv("RINGTRAIN_CUDA_WORKSPACE");
  BOOST_TEST(refusal == "RINGTRAIN_CUDA_WORKSPACE=keep: use per-call (the default) or kept");
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
                     *boost::unit_test::precondition(rt_test::GpuPresent())) {
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

BOOST_AUTO_TEST_CASE(segments_pack_and_finite_flag,
                     *boost::unit_test::precondition(rt_test::GpuPresent())) {
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

// Which GPU each rank of a node takes, from every local rank's list of visible bus ids (what
// the trainer gathers). Before these lists, the choice saw only a device count and the local
// size: every case below with one GPU per rank, or with groups, stopped every rank.
BOOST_AUTO_TEST_SUITE(device_selection)

namespace {

// A node "n7" whose local rank i is world rank 10 + i and sees visible[i].
NodeGpus node_of(std::vector<std::vector<std::string>> visible) {
  NodeGpus node;
  node.host = "n7";
  for (size_t i = 0; i < visible.size(); ++i) node.ranks.push_back(10 + int(i));
  node.visible = std::move(visible);
  return node;
}

std::vector<int> devices_of(const NodeGpus& node, bool share) {
  std::vector<int> devices;
  for (int l = 0; l < int(node.visible.size()); ++l)
    devices.push_back(select_local_device(node, l, share));
  return devices;
}

const std::string kA = "0000:1B:00.0", kB = "0000:3B:00.0", kC = "0000:5E:00.0",
                  kD = "0000:86:00.0";

}  // namespace

// srun --gpus-per-task=1: each rank's CUDA_VISIBLE_DEVICES holds its own GPU, device 0.
BOOST_AUTO_TEST_CASE(one_visible_gpu_per_rank_is_device_0) {
  NodeGpus node = node_of({{kA}, {kB}, {kC}, {kD}});
  BOOST_TEST(devices_of(node, false) == std::vector<int>({0, 0, 0, 0}),
             boost::test_tools::per_element());
  // A rank alone with two GPUs (--gpus-per-task=2) takes the first.
  BOOST_TEST(devices_of(node_of({{kA, kB}, {kC, kD}}), false) == std::vector<int>({0, 0}),
             boost::test_tools::per_element());
}

// mpirun: every rank sees every GPU of the node and takes the one of its local rank.
BOOST_AUTO_TEST_CASE(ranks_sharing_a_list_take_local_rank_order) {
  BOOST_TEST(
      devices_of(node_of({{kA, kB, kC, kD}, {kA, kB, kC, kD}}), false) == std::vector<int>({0, 1}),
      boost::test_tools::per_element());
  std::vector<std::string> all{kA, kB, kC, kD};
  BOOST_TEST(devices_of(node_of({all, all, all, all}), false) == std::vector<int>({0, 1, 2, 3}),
             boost::test_tools::per_element());
  // Two groups (a GPU pair per socket): each group counts from 0 in its own list.
  BOOST_TEST(devices_of(node_of({{kA, kB}, {kA, kB}, {kC, kD}, {kC, kD}}), false) ==
                 std::vector<int>({0, 1, 0, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(more_ranks_than_gpus_needs_train_share_gpus) {
  NodeGpus node = node_of({{kA, kB}, {kA, kB}, {kA, kB}, {kA, kB}});
  const std::string expected =
      "train.backend = cuda: 4 ranks on host n7 see the same 2 GPU(s); launch at most 2 ranks "
      "per node, give each rank its own GPU (srun --gpus-per-task=1), or set "
      "train.share_gpus = true to let ranks share GPUs";
  for (int l = 0; l < 4; ++l)
    BOOST_TEST(input_error_of([&] { select_local_device(node, l, false); }) == expected);
  BOOST_TEST(devices_of(node, true) == std::vector<int>({0, 1, 0, 1}),
             boost::test_tools::per_element());
  // The key the message names is a real deck key.
  BOOST_TEST(input_error_of([] {
               select_local_device(node_of({{kA}, {kA}}), 1, false);
             }).find("train.share_gpus = true") != std::string::npos);
}

// comm.algorithm = nccl runs one rank per GPU: the first pair of ranks on one physical GPU is
// named before NCCL's set-up (same bus id on another host is another GPU).
BOOST_AUTO_TEST_CASE(ranks_sharing_a_physical_gpu_are_named_for_nccl) {
  BOOST_TEST(first_shared_gpu({{"n1", kA}, {"n1", kB}, {"n2", kA}, {"n2", kB}}) == "");
  BOOST_TEST(first_shared_gpu({{"n1", kA}, {"n1", kB}, {"n1", kB}, {"n1", kA}}) ==
             "ranks 1 and 2 both use GPU " + kB + " on host n1");
  BOOST_TEST(first_shared_gpu({{"n1", kA}}) == "");
  BOOST_TEST(first_shared_gpu({}) == "");
}

// Lists that differ but overlap would put two ranks on one GPU without anyone asking.
BOOST_AUTO_TEST_CASE(overlapping_lists_landing_on_one_gpu_are_an_error) {
  NodeGpus node = node_of({{kA, kB}, {kA}});
  const std::string expected =
      "train.backend = cuda: ranks 10 and 11 on host n7 would both use GPU 0000:1B:00.0 (their "
      "visible devices overlap); give each rank its own GPU or set train.share_gpus = true to "
      "let ranks share GPUs";
  BOOST_TEST(input_error_of([&] { select_local_device(node, 0, false); }) == expected);
  BOOST_TEST(input_error_of([&] { select_local_device(node, 1, false); }) == expected);
  BOOST_TEST(devices_of(node, true) == std::vector<int>({0, 0}), boost::test_tools::per_element());
  // Overlapping lists whose picks differ are fine.
  BOOST_TEST(devices_of(node_of({{kA, kB}, {kB}}), false) == std::vector<int>({0, 0}),
             boost::test_tools::per_element());
}

// The line tools/gpu-check.sh reads to tell whether the GPU checks can run, and why not.
BOOST_AUTO_TEST_CASE(device_probe_line) {
  const int count = cuda_device_count();
  const std::string status = cuda_device_status();
  std::printf("cuda devices: %d (%s)\n", count, status.c_str());
  BOOST_TEST((count > 0) == (status == std::to_string(count) + " devices"), status);
}

BOOST_AUTO_TEST_CASE(a_rank_without_a_gpu_is_an_input_error) {
  NodeGpus node = node_of({{kA}, {}});
  BOOST_TEST(select_local_device(node, 0, false) == 0);
  BOOST_TEST(input_error_of([&] { select_local_device(node, 1, false); }) ==
             "train.backend = cuda: rank 11 on host n7 sees no GPU");
  BOOST_CHECK_THROW(select_local_device(node, 2, false), Error);
}

BOOST_AUTO_TEST_SUITE_END()

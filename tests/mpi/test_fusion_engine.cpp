// test_fusion_engine.cpp — the fusion engine across ranks: exact means, random ready orders,
// bucket layout, plan mismatches, misuse errors, bucket memory through BufferOps (every touch,
// as a GPU arena needs), the timeline file; and, run one at a time by
// tests/e2e/fusion_stall.sh because they abort the job, the stall inspector's cases.
// np: 2 3 4
// quick: 3
#define BOOST_TEST_MODULE fusion_engine
#define OMPI_SKIP_MPICXX 1  // C bindings only: the C++ ones warn under -Wextra
#include <sys/mman.h>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "mpi_test.hpp"
#include "ringtrain/comm/allreduce/device_wait.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/core/error.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using namespace ringtrain::comm;
using namespace ringtrain::comm::fusion;
using rt_test::all_ok;

namespace {

// Every engine runs over the world; made once, by the first test, on every rank together.
const Communicator& world_comm() {
  static const Communicator communicator;
  return communicator;
}

// The reduction the engine is given: MPI's own allreduce on a communicator of its own.
class MpiSum {
 public:
  MpiSum() : comm_(duplicate(MPI_COMM_WORLD)) {}
  ReduceFn fn() const {
    MPI_Comm comm = comm_.get();
    return [comm](float* data, size_t count, float divisor) {
      for (size_t done = 0; done < count; done += INT_MAX) {
        int n = int(std::min<size_t>(INT_MAX, count - done));
        int rc = MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, comm);
        if (rc != MPI_SUCCESS) throw Error(str("MPI_Allreduce failed: ", rc));
      }
      for (size_t i = 0; i < count; ++i) data[i] /= divisor;
    };
  }

 private:
  CommHandle comm_;
};

// In backward order; with small_buckets() they make a 10 KiB first bucket, a bucket exactly at
// the 0.5 MiB cap that a small bias rides along with, a mixed one, and an oversized tensor
// with an odd-sized small tail riding along.
std::vector<GradSpec> model_specs() {
  return {{"fc2.bias", {10}},
          {"fc2.weight", {10, 128}},
          {"fc1.bias", {128}},
          {"fc1.weight", {128, 1024}},
          {"conv3.bias", {64}},
          {"conv3.weight", {64, 32, 3, 3}},
          {"conv2.bias", {32}},
          {"conv2.weight", {32, 16, 3, 3}},
          {"conv1.bias", {16}},
          {"conv1.weight", {16, 3, 5, 5}},
          {"embed.weight", {300, 1000}},
          {"odd.weight", {7, 3}}};
}

FusionOptions small_buckets(bool overlap = true) {
  FusionOptions options;
  options.fusion_mib = 0.5;
  options.first_bucket_mib = 0.01;
  options.overlap = overlap;
  return options;
}

size_t numel(const GradSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) n *= size_t(d);
  return n;
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Multiples of 1/16 in [-62.5, 62.5], different per rank, step, tensor and element: any sum of
// a few of them is exact in float, so the exact mean is known.
float grad_value(int rank, int64_t step, size_t tensor, size_t element) {
  uint64_t h = mix(mix(mix(mix(uint64_t(rank)) + uint64_t(step)) + tensor) + element);
  return float(int64_t(h % 2001) - 1000) / 16.0f;
}

// Correctly rounded: the sum is exact in double, and double rounding of a quotient is harmless
// when the wide format has at least 2p+2 bits (53 >= 2*24+2).
float exact_mean(int world, int64_t step, size_t tensor, size_t element) {
  double sum = 0;
  for (int r = 0; r < world; ++r) sum += grad_value(r, step, tensor, element);
  return float(sum / world);
}

void fill_gradient(float* gradient, const GradSpec& spec, int rank, int64_t step, size_t tensor) {
  for (size_t e = 0; e < numel(spec); ++e) gradient[e] = grad_value(rank, step, tensor, e);
}

std::vector<size_t> random_order(size_t n, int rank, int64_t step) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(uint64_t(rank) * 1000003u + uint64_t(step) * 7919u + 17u);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// One training step as backward does it, but on a second thread and in a random order per rank:
// write a gradient, enqueue it; then synchronize() on this thread.
void run_step(FusionEngine& engine, const std::vector<float*>& where,
              const std::vector<GradSpec>& specs, int64_t step) {
  int rank = rt_test::world_rank();
  std::thread backward([&] {
    for (size_t i : random_order(specs.size(), rank, step)) {
      fill_gradient(where[i], specs[i], rank, step, i);
      engine.enqueue(i);
    }
  });
  backward.join();
  engine.synchronize();
}

// Elements that are not bitwise the exact mean, plus padding that is not zero.
size_t count_wrong(const FusionEngine& engine, const std::vector<float*>& where,
                   const std::vector<GradSpec>& specs, int64_t step) {
  int world = rt_test::world_size();
  size_t wrong = 0;
  for (size_t i = 0; i < specs.size(); ++i)
    for (size_t e = 0; e < numel(specs[i]); ++e) {
      float want = exact_mean(world, step, i, e);
      wrong += std::memcmp(&where[i][e], &want, sizeof want) != 0;
    }
  for (const BucketLayout& b : engine.buckets()) {
    const float* end = b.data + b.bytes / sizeof(float);
    for (size_t i = b.first_tensor; i < b.first_tensor + b.tensor_count; ++i) {
      const float* next = i + 1 < b.first_tensor + b.tensor_count ? where[i + 1] : end;
      for (const float* p = where[i] + numel(specs[i]); p < next; ++p) wrong += *p != 0.0f;
    }
  }
  return wrong;
}

uint64_t checksum(const FusionEngine& engine) {
  uint64_t h = 1469598103934665603ull;
  for (const BucketLayout& b : engine.buckets()) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(b.data);
    for (size_t k = 0; k < b.bytes; ++k) h = (h ^ bytes[k]) * 1099511628211ull;
  }
  return h;
}

bool same_on_every_rank(uint64_t value) {
  uint64_t root = value;
  MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return all_ok(root == value);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ringtrain::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every rank checks the same expected text; all ranks must agree that it matched.
void expect_on_every_rank(const std::string& got, const std::string& want) {
  bool ok = got == want;
  if (!ok) BOOST_TEST_MESSAGE("rank " << rt_test::world_rank() << " got: " << got);
  BOOST_TEST(all_ok(ok), "want on every rank: " << want << "\nrank " << rt_test::world_rank()
                                                << " got: " << got);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fusion_engine)

BOOST_AUTO_TEST_CASE(means_are_exact_and_identical_on_every_rank_whatever_the_ready_order) {
  MpiSum sum;
  auto specs = model_specs();
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  auto where = engine.plan(specs);
  for (int64_t step = 0; step < 3; ++step) {
    run_step(engine, where, specs, step);
    size_t wrong = count_wrong(engine, where, specs, step);
    BOOST_TEST(all_ok(wrong == 0), "step " << step << ": " << wrong << " elements wrong on rank "
                                           << rt_test::world_rank());
    BOOST_TEST(same_on_every_rank(checksum(engine)), "step " << step << ": ranks differ bitwise");
  }
  BOOST_TEST(engine.step() == 3);
  BOOST_TEST(engine.records().size() == 3 * engine.bucket_count());
  for (size_t k = 0; k < engine.records().size(); ++k) {  // in bucket order, step after step
    BOOST_TEST(engine.records()[k].step == int64_t(k / engine.bucket_count()));
    BOOST_TEST(engine.records()[k].bucket == int(k % engine.bucket_count()));
  }
  BOOST_TEST(engine.last_allreduce_seconds() > 0.0);
}

BOOST_AUTO_TEST_CASE(overlap_off_reduces_only_in_synchronize_and_gives_the_same_bits) {
  MpiSum sum;
  auto specs = model_specs();
  int rank = rt_test::world_rank();
  std::map<bool, uint64_t> sums;
  for (bool overlap : {true, false}) {
    FusionEngine engine(world_comm(), sum.fn(), small_buckets(overlap));
    auto where = engine.plan(specs);
    for (int64_t step = 0; step < 2; ++step) {
      for (size_t i : random_order(specs.size(), rank, step)) {
        fill_gradient(where[i], specs[i], rank, step, i);
        engine.enqueue(i);
      }
      if (!overlap) {  // nothing may touch the buffers before synchronize(): still our values
        size_t touched = 0;
        for (size_t i = 0; i < specs.size(); ++i)
          for (size_t e = 0; e < numel(specs[i]); ++e)
            touched += where[i][e] != grad_value(rank, step, i, e);
        BOOST_TEST(all_ok(touched == 0), touched << " elements changed before synchronize()");
      }
      engine.synchronize();
      BOOST_TEST(all_ok(count_wrong(engine, where, specs, step) == 0));
    }
    sums[overlap] = checksum(engine);
  }
  BOOST_TEST(all_ok(sums[true] == sums[false]), "overlap on and off differ");
}

// Overlap is a property, not a timing: with bucket 0's gradients enqueued and synchronize() not
// called, bucket 0 must get reduced (the 30 s bound only turns a failure into a message).
BOOST_AUTO_TEST_CASE(with_overlap_a_full_bucket_is_reduced_before_synchronize) {
  MpiSum sum;
  ReduceFn mpi_sum = sum.fn();
  std::promise<void> first_reduced;
  int calls = 0;  // only the comm thread touches it
  ReduceFn watched = [&](float* data, size_t count, float divisor) {
    mpi_sum(data, count, divisor);
    if (calls++ == 0) first_reduced.set_value();
  };
  auto specs = model_specs();
  int rank = rt_test::world_rank();
  FusionEngine engine(world_comm(), watched, small_buckets());
  auto where = engine.plan(specs);
  const BucketLayout first = engine.buckets().front();
  for (size_t i = first.first_tensor; i < first.first_tensor + first.tensor_count; ++i) {
    fill_gradient(where[i], specs[i], rank, 0, i);
    engine.enqueue(i);
  }
  auto reduced = first_reduced.get_future().wait_for(std::chrono::seconds(30));
  BOOST_TEST(all_ok(reduced == std::future_status::ready),
             "bucket 0 not reduced before synchronize()");
  for (size_t i = first.first_tensor + first.tensor_count; i < specs.size(); ++i) {
    fill_gradient(where[i], specs[i], rank, 0, i);
    engine.enqueue(i);
  }
  engine.synchronize();
  BOOST_TEST(all_ok(count_wrong(engine, where, specs, 0) == 0));
  BOOST_TEST(calls == int(engine.bucket_count()));
}

BOOST_AUTO_TEST_CASE(buckets_respect_the_caps_and_never_split_a_tensor) {
  MpiSum sum;
  auto specs = model_specs();
  FusionOptions options = small_buckets();
  FusionEngine engine(world_comm(), sum.fn(), options);
  auto where = engine.plan(specs);
  const auto& buckets = engine.buckets();
  auto padded_bytes = [&](size_t i) { return (numel(specs[i]) + 15) / 16 * 64; };
  const size_t first_cap = size_t(options.first_bucket_mib * (1 << 20));
  const size_t cap = size_t(options.fusion_mib * (1 << 20));

  // Worked out by hand from the shapes: 10 KiB first, then 0.5 MiB buckets, greedy, where
  // a gradient of at most cap/64 joins the current bucket while it stays within its cap (or
  // its largest gradient) plus cap/8: conv3.bias (256 B) joins fc1.weight's full bucket,
  // odd.weight (128 B) the oversized embed.weight's.
  std::vector<std::pair<size_t, size_t>> want = {{0, 3}, {3, 2}, {5, 5}, {10, 2}};
  BOOST_TEST_REQUIRE(engine.bucket_count() == want.size());
  size_t next_tensor = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    BOOST_TEST(buckets[b].first_tensor == want[b].first);
    BOOST_TEST(buckets[b].tensor_count == want[b].second);
    BOOST_TEST(buckets[b].first_tensor == next_tensor);  // consecutive, covering every tensor
    next_tensor += buckets[b].tensor_count;
    size_t bytes = 0;
    for (size_t i = buckets[b].first_tensor; i < next_tensor; ++i) {
      BOOST_TEST(reinterpret_cast<uintptr_t>(where[i]) % 64 == 0);
      BOOST_TEST(where[i] == buckets[b].data + bytes / sizeof(float));  // inside, in order
      bytes += padded_bytes(i);
    }
    BOOST_TEST(buckets[b].bytes == bytes);
    size_t limit = b == 0 ? first_cap : cap;
    size_t largest = 0;
    for (size_t i = buckets[b].first_tensor; i < next_tensor; ++i)
      largest = std::max<size_t>(largest, padded_bytes(i));
    BOOST_TEST(buckets[b].bytes <= std::max(limit, largest) + limit / 8, "bucket " << b);
    if (b + 1 < buckets.size())  // greedy: the next tensor neither fit nor could ride along
      BOOST_TEST(
          (buckets[b].bytes + padded_bytes(next_tensor) > limit &&
           (padded_bytes(next_tensor) > limit / 64 ||
            buckets[b].bytes + padded_bytes(next_tensor) > std::max(limit, largest) + limit / 8)),
          "bucket " << b);
  }
  BOOST_TEST(next_tensor == specs.size());
  BOOST_TEST(padded_bytes(10) > cap);  // the oversized tensor, whole, with a small rider
  BOOST_TEST(buckets[3].bytes == padded_bytes(10) + padded_bytes(11));
}

BOOST_AUTO_TEST_CASE(a_rank_with_another_name_is_named_on_every_rank) {
  MpiSum sum;
  int last = rt_test::world_size() - 1;
  auto specs = model_specs();
  if (rt_test::world_rank() == last) specs[3].name = "fc1.weight_t";
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  expect_on_every_rank(
      error_of([&] { engine.plan(specs); }),
      str("ranks disagree on the fusion plan's gradient 3: rank ", last,
          " has fc1.weight_t [128, 1024], rank 0 has fc1.weight [128, 1024] (every rank must "
          "plan the same gradients, in the same order, with the same shapes)"));
}

BOOST_AUTO_TEST_CASE(ranks_with_another_shape_are_named_on_every_rank) {
  MpiSum sum;
  int world = rt_test::world_size();
  auto specs = model_specs();
  if (rt_test::world_rank() > 0) specs[9].shape = {16, 3, 3, 3};
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  const char* const others[] = {"",
                                "",
                                "",
                                "; rank 2 differs from rank 0 too",
                                "; ranks 2, 3 differ from rank 0 too",
                                "; ranks 2-4 differ from rank 0 too"};
  BOOST_TEST_REQUIRE(world <= 5);
  expect_on_every_rank(error_of([&] { engine.plan(specs); }),
                       "ranks disagree on the fusion plan's gradient 9: rank 1 has conv1.weight "
                       "[16, 3, 3, 3], rank 0 has conv1.weight [16, 3, 5, 5]" +
                           std::string(others[world]) +
                           " (every rank must plan the same gradients, in the same order, with "
                           "the same shapes)");
}

BOOST_AUTO_TEST_CASE(a_rank_with_fewer_gradients_is_named_on_every_rank) {
  MpiSum sum;
  auto specs = model_specs();
  if (rt_test::world_rank() == 1) specs.pop_back();
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  expect_on_every_rank(error_of([&] { engine.plan(specs); }),
                       "ranks disagree on the fusion plan's gradient 11: rank 1 has no gradient 11 "
                       "(only 11), rank 0 has odd.weight [7, 3] (every rank must plan the same "
                       "gradients, in the same order, with the same shapes)");
}

BOOST_AUTO_TEST_CASE(a_name_twice_on_one_rank_is_an_error_on_every_rank) {
  MpiSum sum;
  auto specs = model_specs();
  int last = rt_test::world_size() - 1;
  if (rt_test::world_rank() == last) specs[4].name = "fc1.bias";
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  std::string got = error_of([&] { engine.plan(specs); });
  std::string want_start = str("fusion plan: rank ", last, ": ");
  std::string want_end =
      "gradient name fc1.bias appears twice in the fusion plan; names must be unique";
  bool ok = got.rfind(want_start, 0) == 0 && got.size() > want_end.size() &&
            got.compare(got.size() - want_end.size(), want_end.size(), want_end) == 0;
  BOOST_TEST(all_ok(ok), "got: " << got);
}

BOOST_AUTO_TEST_CASE(different_fusion_sizes_are_named_on_every_rank) {
  MpiSum sum;
  FusionOptions options = small_buckets();
  if (rt_test::world_rank() == 1) options.fusion_mib = 2;
  FusionEngine engine(world_comm(), sum.fn(), options);
  expect_on_every_rank(error_of([&] { engine.plan(model_specs()); }),
                       "ranks disagree on comm.fusion_mib: rank 1 has 2, rank 0 has 0.5 (every "
                       "rank must read the same deck)");
}

// One rank sleeping at the gate for a peer that never arrives there would hang the job.
BOOST_AUTO_TEST_CASE(a_different_local_gate_setting_is_named_on_every_rank) {
  MpiSum sum;
  FusionOptions options = small_buckets();
  if (rt_test::world_rank() == 1) options.local_gate = false;
  FusionEngine engine(world_comm(), sum.fn(), options);
  expect_on_every_rank(error_of([&] { engine.plan(model_specs()); }),
                       "ranks disagree on comm.local_gate: rank 1 has 0, rank 0 has 1 (every rank "
                       "must read the same deck)");
}

BOOST_AUTO_TEST_CASE(a_gradient_enqueued_twice_is_named_and_the_step_still_completes) {
  MpiSum sum;
  auto specs = model_specs();
  int rank = rt_test::world_rank();
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  auto where = engine.plan(specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    fill_gradient(where[i], specs[i], rank, 0, i);
    engine.enqueue(i);
  }
  expect_on_every_rank(error_of([&] { engine.enqueue(2); }),
                       "gradient fc1.bias [128] (index 2) enqueued twice in step 0 (enqueue each "
                       "gradient once per step, after backward has written it)");
  engine.synchronize();
  BOOST_TEST(all_ok(count_wrong(engine, where, specs, 0) == 0));
}

BOOST_AUTO_TEST_CASE(synchronize_names_the_gradients_never_enqueued) {
  MpiSum sum;
  auto specs = model_specs();
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  engine.plan(specs);
  for (size_t i = 0; i < specs.size(); ++i)
    if (i != 6 && i != 11) engine.enqueue(i);
  std::string want =
      "synchronize() in step 0: 2 of 12 gradients never enqueued: conv2.bias [32], odd.weight "
      "[7, 3] (backward must enqueue every planned gradient once per step)";
  expect_on_every_rank(error_of([&] { engine.synchronize(); }), want);
  expect_on_every_rank(error_of([&] { engine.synchronize(); }),
                       "fusion engine unusable after an earlier error: " + want);
  // Leaving scope must not hang: the comm thread is parked before the unfinished bucket.
}

BOOST_AUTO_TEST_CASE(a_failing_reduction_is_rethrown_by_synchronize) {
  auto specs = model_specs();
  int calls = 0;  // only the comm thread touches it
  ReduceFn failing = [&](float*, size_t, float) {
    if (++calls == 2) throw Error("injected reduce failure");
  };
  FusionEngine engine(world_comm(), failing, small_buckets(false));  // fails in synchronize()
  engine.plan(specs);
  for (size_t i = 0; i < specs.size(); ++i) engine.enqueue(i);
  expect_on_every_rank(error_of([&] { engine.synchronize(); }), "injected reduce failure");
  expect_on_every_rank(error_of([&] { engine.enqueue(0); }), "injected reduce failure");
  BOOST_TEST(calls == 2);  // nothing after the failed bucket
}

BOOST_AUTO_TEST_CASE(the_layout_summary_names_every_bucket) {
  MpiSum sum;
  FusionEngine engine(world_comm(), sum.fn(), small_buckets());
  engine.plan(model_specs());
  BOOST_TEST(engine.layout_summary() ==
             "4 buckets (first <= 0.01 MiB, then <= 0.5 MiB) for 12 gradients: 0.00543, 0.5, "
             "0.0927, 1.14 MiB");
}

BOOST_AUTO_TEST_CASE(a_first_bucket_of_zero_mib_is_as_large_as_the_others) {
  MpiSum sum;
  FusionOptions options = small_buckets();
  options.first_bucket_mib = 0;
  FusionEngine engine(world_comm(), sum.fn(), options);
  engine.plan(model_specs());
  BOOST_TEST(engine.buckets().front().tensor_count == 3u);  // fc1.weight (0.5 MiB) did not fit
  BOOST_TEST(engine.layout_summary() ==
             "4 buckets (first <= 0.5 MiB, then <= 0.5 MiB) for 12 gradients: 0.00543, 0.5, "
             "0.0927, 1.14 MiB");
}

BOOST_AUTO_TEST_CASE(bad_options_are_input_errors) {
  MpiSum sum;
  FusionOptions options;
  options.fusion_mib = 0;
  std::string got;
  try {
    FusionEngine engine(world_comm(), sum.fn(), options);
  } catch (const InputError& e) {
    got = e.what();
  }
  BOOST_TEST(got == "comm.fusion_mib = 0: must be a size in MiB > 0");
}

BOOST_AUTO_TEST_SUITE_END()

// ---- bucket memory through BufferOps (how a GPU backend keeps the arena on the device) -----

namespace {

// Stands in for device memory: pages the host cannot touch (PROT_NONE) except inside
// access(), so an engine that touched bucket memory anywhere but through the ops and the
// reduce function would crash the test. Counts every op and checks where it runs.
class GuardedMemory {
 public:
  struct Call {
    const float* data;
    size_t count;
    float divisor;
  };

  // RW for the duration of f; one access at a time (the comm thread's and the test's).
  template <typename F>
  void access(F&& f) {
    std::lock_guard<std::mutex> lock(access_mutex_);
    protect(PROT_READ | PROT_WRITE);
    f();
    protect(PROT_NONE);
  }

  BufferOps ops() {
    BufferOps ops;
    ops.alloc = [this](size_t bytes) {
      mapped_bytes_ = (bytes + 4095) / 4096 * 4096;
      void* memory =
          mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (memory == MAP_FAILED) throw Error("mmap of the guarded arena failed");
      std::memset(memory, 0xFF, mapped_bytes_);  // NaNs: only zero() makes the padding 0
      base_ = static_cast<float*>(memory);
      protect(PROT_NONE);
      ++allocs_;
      alloc_bytes_ = bytes;
      return std::shared_ptr<float>(base_, [this](float* p) {
        munmap(p, mapped_bytes_);
        ++frees_;
      });
    };
    ops.zero = [this](float* data, size_t count) {
      zeros_.push_back({data, count, 0.0f});
      access([&] { std::memset(data, 0, count * sizeof(float)); });
    };
    ops.mark_ready = [this](size_t bucket) {
      std::lock_guard<std::mutex> lock(count_mutex_);
      if (marks_.size() <= bucket) {
        marks_.resize(bucket + 1);
        waits_.resize(bucket + 1);
      }
      ++marks_[bucket];
      marks_off_test_thread_ += std::this_thread::get_id() != test_thread_;
    };
    ops.wait_ready = [this](size_t bucket) {
      std::lock_guard<std::mutex> lock(count_mutex_);
      // Every wait follows the mark of the same step: one more mark than waits so far.
      bool marked = bucket < marks_.size() && marks_[bucket] == waits_[bucket] + 1;
      unmarked_waits_ += !marked;
      if (bucket < waits_.size()) ++waits_[bucket];
      wait_order_.push_back(bucket);
      comm_work_on_test_thread_ += std::this_thread::get_id() == test_thread_;
    };
    return ops;
  }

  // Like a staging allreducer: copy out, reduce on the host, copy back.
  ReduceFn staged(ReduceFn host_mean) {
    return [this, host_mean](float* data, size_t count, float divisor) {
      {
        std::lock_guard<std::mutex> lock(count_mutex_);
        reduces_.push_back({data, count, divisor});
        comm_work_on_test_thread_ += std::this_thread::get_id() == test_thread_;
      }
      std::vector<float> host(count);
      access([&] { std::memcpy(host.data(), data, count * sizeof(float)); });
      host_mean(host.data(), count, divisor);
      access([&] { std::memcpy(data, host.data(), count * sizeof(float)); });
    };
  }

  std::thread::id test_thread_ = std::this_thread::get_id();
  int allocs_ = 0, frees_ = 0;
  size_t alloc_bytes_ = 0;
  float* base_ = nullptr;
  std::vector<Call> zeros_, reduces_;
  std::vector<int> marks_, waits_;
  std::vector<size_t> wait_order_;
  int unmarked_waits_ = 0;
  int marks_off_test_thread_ = 0;     // mark_ready not on the thread that enqueues
  int comm_work_on_test_thread_ = 0;  // wait_ready or a reduction not on the comm thread

 private:
  // Also on the comm thread, where Boost.Test's assertions are not safe.
  void protect(int protection) {
    if (mprotect(base_, mapped_bytes_, protection) != 0) {
      std::perror("mprotect");
      std::abort();
    }
  }

  std::mutex access_mutex_, count_mutex_;
  size_t mapped_bytes_ = 0;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(fusion_buffer_ops)

BOOST_AUTO_TEST_CASE(every_touch_of_bucket_memory_goes_through_the_ops_and_means_stay_exact) {
  const auto specs = model_specs();
  const int world = rt_test::world_size(), rank = rt_test::world_rank();
  const int64_t steps = 3;
  for (bool overlap : {true, false}) {
    BOOST_TEST_CONTEXT("overlap " << overlap) {
      GuardedMemory memory;
      MpiSum guarded_sum, plain_sum;
      {
        FusionOptions options = small_buckets(overlap);
        options.buffer_ops = memory.ops();
        FusionEngine guarded(world_comm(), memory.staged(guarded_sum.fn()), options);
        FusionEngine plain(world_comm(), plain_sum.fn(), small_buckets(overlap));
        auto where = guarded.plan(specs);
        auto plain_where = plain.plan(specs);
        const size_t buckets = guarded.bucket_count();
        const BucketLayout& last = guarded.buckets().back();
        const size_t arena_floats = size_t(last.data + last.bytes / sizeof(float) - where[0]);

        BOOST_TEST(memory.allocs_ == 1);
        BOOST_TEST(memory.alloc_bytes_ == arena_floats * sizeof(float));
        BOOST_TEST(where[0] == memory.base_);
        BOOST_TEST_REQUIRE(memory.zeros_.size() == 1u);
        BOOST_TEST(memory.zeros_[0].data == memory.base_);
        BOOST_TEST(memory.zeros_[0].count == arena_floats);

        for (int64_t step = 0; step < steps; ++step) {
          for (size_t i : random_order(specs.size(), rank, step)) {
            memory.access([&] { fill_gradient(where[i], specs[i], rank, step, i); });
            guarded.enqueue(i);
          }
          guarded.synchronize();
          run_step(plain, plain_where, specs, step);
          size_t wrong = 0;
          bool same_bits = false;
          memory.access([&] {
            wrong = count_wrong(guarded, where, specs, step);
            same_bits = std::memcmp(where[0], plain_where[0], arena_floats * sizeof(float)) == 0;
          });
          BOOST_TEST(all_ok(wrong == 0),
                     "step " << step << ": " << wrong << " elements wrong on rank " << rank);
          BOOST_TEST(all_ok(same_bits), "step " << step << ": differs from host buffers");
        }

        // One mark and one wait per bucket and step, every wait after its mark, in order;
        // marks on the enqueuing thread, waits and reductions on the comm thread.
        BOOST_TEST(memory.marks_ == std::vector<int>(buckets, int(steps)),
                   boost::test_tools::per_element());
        BOOST_TEST(memory.waits_ == std::vector<int>(buckets, int(steps)),
                   boost::test_tools::per_element());
        BOOST_TEST(memory.unmarked_waits_ == 0);
        std::vector<size_t> order;
        for (int64_t step = 0; step < steps; ++step)
          for (size_t b = 0; b < buckets; ++b) order.push_back(b);
        BOOST_TEST(memory.wait_order_ == order, boost::test_tools::per_element());
        BOOST_TEST(memory.marks_off_test_thread_ == 0);
        BOOST_TEST(memory.comm_work_on_test_thread_ == 0);
        // One reduction to the mean (divisor: the world size) per bucket and step, over the
        // whole bucket.
        BOOST_TEST_REQUIRE(memory.reduces_.size() == size_t(steps) * buckets);
        for (size_t k = 0; k < memory.reduces_.size(); ++k) {
          const BucketLayout& b = guarded.buckets()[k % buckets];
          BOOST_TEST(memory.reduces_[k].data == b.data);
          BOOST_TEST(memory.reduces_[k].count == b.bytes / sizeof(float));
          BOOST_TEST(memory.reduces_[k].divisor == float(world));
        }
        BOOST_TEST(memory.frees_ == 0);
      }
      BOOST_TEST(memory.frees_ == 1);  // the arena's owner, when the engine went
    }
  }
}

BOOST_AUTO_TEST_CASE(an_unset_op_is_an_error) {
  MpiSum sum;
  FusionOptions options;
  options.buffer_ops.wait_ready = nullptr;
  expect_on_every_rank(error_of([&] { FusionEngine engine(world_comm(), sum.fn(), options); }),
                       "FusionEngine: every BufferOps member must be set (start from "
                       "host_buffer_ops())");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fusion_timeline)

// RT_TEST_TIMELINE keeps the file where tests/e2e/fusion_timeline.sh checks it with Python.
BOOST_AUTO_TEST_CASE(writes_one_trace_for_all_ranks) {
  int rank = rt_test::world_rank(), world = rt_test::world_size();
  const char* keep = std::getenv("RT_TEST_TIMELINE");
  std::string path =
      keep ? keep : "/tmp/rt-test-fusion-timeline-" + std::to_string(world) + ".json";
  MpiSum sum;
  auto specs = model_specs();
  Timeline timeline(true, rank);
  size_t buckets = 0;
  std::vector<size_t> bucket_bytes;
  {
    FusionEngine engine(world_comm(), sum.fn(), small_buckets(), &timeline);
    auto where = engine.plan(specs);
    for (int64_t step = 0; step < 2; ++step) {
      run_step(engine, where, specs, step);
      ScopedSpan optimizer(&timeline, "optimizer", "compute");
    }
    buckets = engine.bucket_count();
    for (const auto& b : engine.buckets()) bucket_bytes.push_back(b.bytes);
  }
  timeline.write_chrome_trace(world_comm(), path);

  bool ok = true;
  std::string why;
  if (rank == 0) {
    namespace pt = boost::property_tree;
    pt::ptree trace;
    try {
      pt::read_json(path, trace);
    } catch (const std::exception& e) {
      ok = false;
      why = e.what();
    }
    std::map<int, std::string> process_names;
    std::map<int, std::map<std::string, int>> spans;  // pid -> category -> count
    std::set<size_t> comm_bytes;
    pt::ptree events;
    if (auto child = trace.get_child_optional("traceEvents")) events = *child;
    for (const auto& item : events) {
      const pt::ptree& e = item.second;
      int pid = e.get<int>("pid", -1);
      if (e.get<std::string>("ph", "") == "M" && e.get<std::string>("name", "") == "process_name")
        process_names[pid] = e.get<std::string>("args.name", "");
      if (e.get<std::string>("ph", "") != "X") continue;
      spans[pid][e.get<std::string>("cat", "")] += 1;
      if (e.get<std::string>("cat", "") == "comm")
        comm_bytes.insert(e.get<size_t>("args.bytes", 0));
    }
    for (int r = 0; r < world; ++r) {
      if (process_names[r] != "rank " + std::to_string(r)) ok = false, why += " process_name";
      if (spans[r]["comm"] != int(2 * buckets)) ok = false, why += " comm spans";
      if (spans[r]["enqueue"] != int(2 * specs.size())) ok = false, why += " enqueue spans";
      if (spans[r]["wait"] != 2) ok = false, why += " wait spans";
      if (spans[r]["compute"] != 2) ok = false, why += " compute spans";
    }
    if (comm_bytes != std::set<size_t>(bucket_bytes.begin(), bucket_bytes.end()))
      ok = false, why += " bucket bytes";
    if (!keep) std::remove(path.c_str());
  }
  BOOST_TEST(all_ok(ok), "trace " << path << " wrong:" << why);
}

BOOST_AUTO_TEST_CASE(an_unwritable_path_is_an_error_on_every_rank) {
  Timeline timeline(true, rt_test::world_rank());
  timeline.span("step", "train", Timeline::now(), Timeline::now() + 1e-3);
  std::string got = error_of([&] { timeline.write_chrome_trace(world_comm(), "/proc/rt/t.json"); });
  std::string want = "timeline: rank 0: cannot create /proc/rt/t.json.tmp-";  // temp_path_for
  BOOST_TEST(all_ok(got.rfind(want, 0) == 0), "got: " << got);
}

BOOST_AUTO_TEST_SUITE_END()

// A reduction that takes several stall timeouts but keeps moving (a slow link: the allreducer's
// progress count goes up every 50 ms) is no stall: the step completes with the exact mean on
// every rank. Before, the deadline moved only when a bucket finished, and the job was aborted.
BOOST_AUTO_TEST_CASE(a_slow_reduction_that_moves_is_not_a_stall) {
  MpiSum sum;
  auto specs = model_specs();
  FusionOptions options = small_buckets();
  options.stall_timeout_s = 0.5;  // the reduction below takes 2 of them, moving every 50 ms
  std::atomic<uint64_t> moved{0};
  options.progress = [&] { return moved.load(); };
  bool slow = true;  // the first bucket only: the test takes about a second
  ReduceFn reduce = [&](float* data, size_t count, float divisor) {
    for (int piece = 0; slow && piece < 20; ++piece) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the slow link, not a wait
      ++moved;
    }
    slow = false;
    sum.fn()(data, count, divisor);
  };
  FusionEngine engine(world_comm(), reduce, options);
  auto where = engine.plan(specs);
  run_step(engine, where, specs, 0);
  BOOST_TEST(all_ok(count_wrong(engine, where, specs, 0) == 0));
}

// ---- the stall inspector: each case aborts the job, so tests/e2e/fusion_stall.sh runs them
// one at a time (--run_test=fusion_stall/NAME) and checks every rank's line and exit. ---------

BOOST_AUTO_TEST_SUITE(fusion_stall, *boost::unit_test::disabled())

namespace {
constexpr int kStuckRank = 1;

enum class Stuck { computing, in_synchronize, leaving };

// Step 0 completes everywhere; in step 1 rank 1 enqueues only `stuck_enqueues` gradients (in
// plan order) and then computes "forever", or calls synchronize() (which throws; it then hangs
// in its error handling), or leaves; the others enqueue everything and synchronize().
void stall_in_step_one(size_t stuck_enqueues, Stuck how = Stuck::computing) {
  MpiSum sum;
  auto specs = model_specs();
  FusionOptions options = small_buckets();
  options.stall_timeout_s = 2;
  FusionEngine engine(world_comm(), sum.fn(), options);
  auto where = engine.plan(specs);
  run_step(engine, where, specs, 0);
  bool stuck = rt_test::world_rank() == kStuckRank;
  if (stuck && how == Stuck::leaving) return;  // on to MPI_Finalize, like a rank with fewer batches
  for (size_t i = 0; i < (stuck ? stuck_enqueues : specs.size()); ++i) engine.enqueue(i);
  if (!stuck) {
    engine.synchronize();
  } else if (how == Stuck::in_synchronize) {
    BOOST_TEST_MESSAGE(error_of([&] { engine.synchronize(); }));
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));  // stands for a hung kernel or handler
  BOOST_FAIL("the stall inspector did not abort the job");
}
}  // namespace

// Rank 1 stops inside bucket 2 (it enqueued conv3.*): every rank names what it lacks.
BOOST_AUTO_TEST_CASE(rank_stops_enqueuing) {
  stall_in_step_one(6);
}

// Rank 1 never reaches the engine in step 1: it cannot answer; the others name it.
BOOST_AUTO_TEST_CASE(rank_stuck_outside_the_engine) {
  stall_in_step_one(0);
}

// Rank 1 finishes early (destroys its engine, finalizes MPI): the others name it. Run it by
// hand: OpenMPI 4.1.4's mpirun often hangs after any abort once a rank has finalized.
BOOST_AUTO_TEST_CASE(rank_leaves_early) {
  stall_in_step_one(0, Stuck::leaving);
}

// Rank 1 calls synchronize() without conv2.* and conv1.*: it throws there, and if the process
// lingers instead of aborting, the inspector still names what it lacks on every rank.
BOOST_AUTO_TEST_CASE(rank_synchronizes_without_some) {
  stall_in_step_one(6, Stuck::in_synchronize);
}

// Every rank's reduction of bucket 0 in step 1 waits on a device that never finishes and
// reports no error (a stuck NCCL kernel), as NcclAllreduce waits: wait_for_device with no
// deadline of its own. When the watchdog fires, on_stall makes the wait give up (abort, throw)
// and its text joins each rank's line. Before: the report could only say a rank was stuck
// inside the reduction, and the wait (cudaStreamSynchronize) never returned.
BOOST_AUTO_TEST_CASE(reduction_stuck_on_a_device) {
  MpiSum sum;
  auto specs = model_specs();
  FusionOptions options = small_buckets();
  options.stall_timeout_s = 2;
  std::atomic<bool> stalled{false}, stuck{false};
  const std::string waiting =
      "fake nccl allreduce on rank " + std::to_string(rt_test::world_rank());
  options.on_stall = [&] {
    stalled = true;
    return waiting + " had not finished, and NCCL reported no error";
  };
  ReduceFn reduce = [&](float* data, size_t count, float divisor) {
    if (!stuck) return sum.fn()(data, count, divisor);
    allreduce::DeviceWaitOps ops;
    ops.finished = [] { return false; };
    ops.async_error = [] { return std::string(); };
    ops.abort = [] {};
    ops.stalled = [&] { return stalled.load(); };
    allreduce::wait_for_device(waiting, 0, ops);
  };
  FusionEngine engine(world_comm(), reduce, options);
  auto where = engine.plan(specs);
  run_step(engine, where, specs, 0);
  stuck = true;
  for (size_t i = 0; i < specs.size(); ++i) engine.enqueue(i);
  BOOST_TEST_MESSAGE(error_of([&] { engine.synchronize(); }));
  std::this_thread::sleep_for(std::chrono::seconds(60));
  BOOST_FAIL("the stall inspector did not abort the job");
}

BOOST_AUTO_TEST_SUITE_END()

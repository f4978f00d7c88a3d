// test_fp16_wire.cpp — the fp16 wire pre-divides by a power of two (P >= world size): values
// near fp16's limit (65504), as loss-scaled gradients are, reduce to a finite mean and sum within
// the wire's rounding on ring, rhd, auto and hierarchical, where the wire's sums gave inf; where
// nothing overflows, not a bit changes.
// np: 2 3 4
// quick: 2
#define BOOST_TEST_MODULE fp16_wire
#include <cmath>
#include <vector>

#include "mpi_test.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using comm::allreduce::Algorithm;

namespace {

// Rank r's element i: from 30000 to 60000, position- and rank-dependent, all fp16-representable.
float value(int rank, size_t i) {
  return float(30000 + int((i * 37 + size_t(rank) * 1013) % 30000));
}

// Reduces `count` such values (divide = world: the mean, 1: sum()) and returns the largest
// error against the exact result relative to the largest value (inf when any is not finite).
double worst_error(comm::allreduce::Allreducer& reducer, size_t count, bool mean, int world,
                   int rank) {
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value(rank, i);
  if (mean)
    reducer.sum_and_divide(data.data(), count, float(world));
  else
    reducer.sum(data.data(), count);
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int r = 0; r < world; ++r) exact += value(r, i);
    if (mean) exact /= world;
    if (!std::isfinite(data[i])) return INFINITY;
    worst = std::max(worst, std::fabs(data[i] - exact) / std::fabs(exact));
  }
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_CASE(near_limit_values_reduce_finite_on_the_fp16_wire) {
  comm::Communicator comm;
  const int world = comm.size(), rank = comm.rank();
  comm::allreduce::AllreduceOptions options;
  options.wire = comm::allreduce::Wire::fp16;
  // Each value passes at most one pre-divide, N fp16 roundings and fp32 adds: 2^-11 per trip,
  // with room for the world size.
  const double bound = (world + 2) * std::ldexp(1.0, -11);
  for (Algorithm algorithm :
       {Algorithm::ring, Algorithm::rhd, Algorithm::automatic, Algorithm::hierarchical}) {
    auto reducer = comm::allreduce::make_allreducer(comm, algorithm, options);
    for (size_t count : {size_t(1), size_t(5), size_t(1031), size_t(70000)})
      for (bool mean : {true, false}) {
        const double error = worst_error(*reducer, count, mean, world, rank);
        BOOST_TEST(rt_test::all_ok(error <= bound),
                   reducer->name() << ", " << count << " values, " << (mean ? "mean" : "sum")
                                   << ": relative error " << error << " > " << bound);
      }
  }
}

// The pre-divide is by a power of two: where nothing overflows, the mean is bitwise the one the
// ring gives without it (rounding-sensitive values, each rank its own).
BOOST_AUTO_TEST_CASE(predivide_changes_no_bit_where_nothing_overflows) {
  comm::Communicator comm;
  const int world = comm.size(), rank = comm.rank();
  comm::allreduce::AllreduceOptions options;
  options.wire = comm::allreduce::Wire::fp16;
  auto predivided = comm::allreduce::make_allreducer(comm, Algorithm::ring, options);
  comm::allreduce::RingAllreduce plain(comm.raw(), comm.ring_order(), options);
  const size_t count = 4099;
  std::vector<float> a(count), b(count);
  for (size_t i = 0; i < count; ++i)
    a[i] = b[i] = float(std::sin(double(i) * 0.7 + rank)) * 300.0f / float(1 + i % 17);
  predivided->sum_and_divide(a.data(), count, float(world) * 4);
  plain.sum_and_divide(b.data(), count, float(world) * 4);
  BOOST_TEST(rt_test::all_ok(a == b), "the predivided mean differs from the plain ring's");
}

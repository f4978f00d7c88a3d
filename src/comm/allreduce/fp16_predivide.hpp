// fp16_predivide.hpp — the fp16 wire's pre-divide: each rank sends at most its share of the mean,
// so no partial sum on the wire outgrows the largest value one rank holds (internal to comm/).
#pragma once

#include <memory>

#include "ringtrain/comm/allreduce/allreduce.hpp"

namespace ringtrain::comm::allreduce {

// Wraps a host-memory allreducer on the fp16 wire (ring, rhd, auto, hierarchical) of a world of
// N = world_size ranks: every call divides the data by P, the power of two from N up, first,
// and the result by divisor / P after. Why: on the fp16 wire (largest value 65504) ring and rhd
// send partial sums, and ring's allgather the whole sum; a sum over N ranks of values near the
// limit (a loss-scaled gradient) is inf on the wire although each value and the mean fit.
// Pre-divided, a partial sum of k ranks is at most k/P <= 1 times the largest value, at every
// world size. P is a power of two, not N, so that the pre-divide is exact: where nothing
// overflows or goes subnormal, every result is bitwise what it was without it (sums of small
// integers stay exact), and only the overflow changes. The cost: P x smaller values reach fp16's
// subnormals sooner, which the loss scale (train.loss_scale) lifts back.
// P: the power of two from world_size up (1 for one rank). NCCL's fp16 wire pre-divides by it too.
float fp16_predivisor(int world_size);

std::unique_ptr<Allreducer> predivide_for_fp16_wire(std::unique_ptr<Allreducer> inner,
                                                    int world_size);

}  // namespace ringtrain::comm::allreduce

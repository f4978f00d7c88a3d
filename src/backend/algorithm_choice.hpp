// algorithm_choice.hpp — which convolution algorithm a list of measured trials allows (the
// rule the CUDA backend applies to cudnnFind*'s results, kept free of cuDNN types so that
// it builds and is tested everywhere).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ringtrain::backend {

// One row of a cudnnFindConvolution*AlgorithmEx answer: what cuDNN measured for one
// algorithm on the real shapes.
struct AlgorithmTrial {
  int algo = 0;
  bool succeeded = false;  // status == CUDNN_STATUS_SUCCESS
  float ms = 0;            // measured time
  size_t memory = 0;       // workspace bytes it needs
  bool deterministic = false;
};

// Index into trials of the fastest one that succeeded, needs at most workspace_limit_mib
// MiB and, when `deterministic`, is deterministic (bitwise repeatable). None: InputError
// naming `what` ("forward algorithm for input [8,3,32,32]"), the limit and the deck keys
// that would allow one.
size_t choose_algorithm(const std::vector<AlgorithmTrial>& trials, size_t workspace_limit_mib,
                        bool deterministic, const std::string& what);

}  // namespace ringtrain::backend

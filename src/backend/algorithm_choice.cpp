// algorithm_choice.cpp — the fastest allowed convolution algorithm of a measured list.
#include "algorithm_choice.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {

size_t choose_algorithm(const std::vector<AlgorithmTrial>& trials, size_t workspace_limit_mib,
                        bool deterministic, const std::string& what) {
  const size_t limit = workspace_limit_mib << 20;
  size_t best = trials.size();
  for (size_t i = 0; i < trials.size(); ++i) {
    const AlgorithmTrial& t = trials[i];
    if (!t.succeeded || t.memory > limit || (deterministic && !t.deterministic)) continue;
    // cuDNN sorts by time already; comparing keeps the rule independent of that.
    if (best == trials.size() || t.ms < trials[best].ms) best = i;
  }
  if (best < trials.size()) return best;
  if (deterministic)
    throw InputError(str("cuDNN has no deterministic ", what,
                         " within train.cudnn_workspace_mib = ", workspace_limit_mib,
                         "; raise train.cudnn_workspace_mib or set train.deterministic = false"));
  throw InputError(str("cuDNN has no ", what, " within train.cudnn_workspace_mib = ",
                       workspace_limit_mib, "; raise train.cudnn_workspace_mib"));
}

}  // namespace ringtrain::backend

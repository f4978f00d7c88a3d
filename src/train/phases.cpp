// phases.cpp — the names of the run's collective phases (train/phases.hpp).
#include "ringtrain/train/phases.hpp"

namespace ringtrain::train {

const PhaseInfo& phase_info(Phase phase) {
  static const PhaseInfo table[] = {
      {"sync-bn", "synchronized batch norm", false},
      {"checkpoint", "the checkpoint", true},
      {"stop-check", "the stop check", false},
      {"gradient-check", "the agreement on finite gradients (loss scaling)", false},
      {"metrics", "the loss and accuracy reduction", false},
      {"bn-average", "the BN statistics average", false},
      {"evaluation", "evaluation", false},
      {"results", "the results file", true},
      {"timeline", "the timeline", true},
      {"set-up", "the set-up (data, model, buckets)", true},
      {"weight-check", "the weight check", false},
  };
  return table[static_cast<int>(phase)];
}

}  // namespace ringtrain::train

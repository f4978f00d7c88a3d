// phases.hpp — the phases of a run in which ranks meet in a collective outside the fusion
// engine: what the stall report calls each, and the id a test names to stop a rank there.
#pragma once

namespace ringtrain::train {

enum class Phase {
  kSyncBatchNorm,
  kCheckpoint,
  kStopCheck,
  kGradientCheck,
  kMetrics,
  kBatchNormAverage,
  kEvaluation,
  kResults,
  kTimeline,
  kSetUp,
  kWeightCheck
};

struct PhaseInfo {
  const char* id;    // for RINGTRAIN_STOP_AT (core/fault.hpp), e.g. "stop-check"
  const char* text;  // for the stall report, e.g. "the stop check"
  bool io;           // the others wait while one rank does I/O (writes a file, opens the data)
};

const PhaseInfo& phase_info(Phase phase);

}  // namespace ringtrain::train

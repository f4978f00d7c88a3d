// weight_check.hpp — the proof that every rank holds the same model: a digest (core/digest.hpp)
// of each rank's parameters and optimizer state, compared across ranks in one small collective
// every comm.verify_every steps and before every checkpoint.
//
// Data parallelism rests on every rank holding bitwise the same weights after every step; a
// flipped bit in one node's memory, or a rank that skipped an update, breaks it silently. On a
// mismatch every rank stops with one line naming the step, the ranks unlike the majority and the
// first tensor that differs (comm.on_divergence = stop), or the majority's copy is sent to every
// rank and the run goes on, warned and counted (repair; without a majority it stops too). Each
// rank's BN running statistics differ by design until an epoch's end: they are left out unless
// comm.sync_bn makes them alike.
//
// defines: CheckedTensor, checked_tensors(), state_digest(), digest_hex(), CheckRecord,
//          WeightCheck, weight_checks_record(), verify_resumed_weights(), flip_weight_bit()
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/digest_vote.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/io/results.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace ringtrain::train {

// One tensor the check covers, named for messages; the tensor shares the model's memory.
struct CheckedTensor {
  std::string name;
  backend::Tensor tensor;
};

// In this order: every parameter (forward order), the optimizer's state of each ("NAME
// (momentum)" for SGD and LARS; "NAME (first moment)", then every "NAME (second moment)" for
// LAMB and AdamW), and with bn_statistics every BN running statistic.
std::vector<CheckedTensor> checked_tensors(const nn::Model& model, const nn::Optimizer& optimizer,
                                           bool bn_statistics);

// The per-tensor digests folded in order, then the optimizer's step count (a rank that skipped
// or repeated an update differs there even when its weights happen to match).
uint64_t state_digest(const std::vector<uint64_t>& per_tensor, int64_t optimizer_steps);

// "0123456789abcdef": how messages and checkpoints show a digest.
std::string digest_hex(uint64_t digest);

// One check, as the results file records it.
struct CheckRecord {
  int64_t step = 0;
  std::vector<uint64_t> digests;  // one per rank, as compared
  double seconds = 0;             // this rank's: digest, vote and (on a mismatch) the rest
  bool repaired = false;
};

class WeightCheck {
 public:
  WeightCheck(const CommConfig& config, const comm::Communicator& comm, nn::Model& model,
              nn::Optimizer& optimizer, backend::Backend& be);

  // True when comm.verify_every says step is due.
  bool due(int64_t step) const;
  // Collective: compares every rank's digest at step. Agreed: returns it. Else with a majority
  // and repair: every rank takes the majority's copy, a warning, the digest agreed after. Else
  // throws Error on every rank alike, one line. The caller runs it inside fail_together().
  uint64_t run(int64_t step);
  // This rank's digest alone (no collective): --resume compares it with the checkpoint's.
  uint64_t local_digest(bool bn_statistics);
  bool covers_bn_statistics() const { return bn_statistics_; }

  // The step of the checkpoint the stop message says is kept (-1: none written yet).
  void set_checkpoint_step(int64_t step) { checkpoint_step_ = step; }
  const std::vector<CheckRecord>& records() const { return records_; }
  int64_t repairs() const { return repairs_; }

 private:
  std::string divergence_line(int64_t step, const comm::DigestVote& vote,
                              const std::vector<CheckedTensor>& tensors);
  void repair_from(int reference, const std::vector<CheckedTensor>& tensors);

  CommConfig config_;
  const comm::Communicator& comm_;
  nn::Model& model_;
  nn::Optimizer& optimizer_;
  backend::Backend& be_;
  bool bn_statistics_;
  int64_t checkpoint_step_ = -1;
  int64_t repairs_ = 0;
  std::vector<CheckRecord> records_;
};

// Collective: the checks for the results file; rank 0 gets every rank's seconds, the others an
// empty record.
io::WeightChecks weight_checks_record(const comm::Communicator& comm, const WeightCheck& check,
                                      const CommConfig& config);

// After --resume loaded the checkpoint at path: this rank's digest of what it loaded against the
// one the ranks agreed on when it was written; InputError naming the file when they differ (it
// changed or was damaged since). A checkpoint from before the check is taken as it is, said once.
void verify_resumed_weights(WeightCheck& check, const ResumePoint& loaded, const std::string& path);

// The RINGTRAIN_FAULT=flip-weight hook: flips bit 16 of the middle value of the middle
// parameter in place and returns what it did, for the log.
std::string flip_weight_bit(nn::Model& model, backend::Backend& be);

}  // namespace ringtrain::train

// weight_check.cpp — the ranks' weight digests compared, the stop line, the repair from the
// majority's copy, and the flipped-bit fault that proves it (train/weight_check.hpp).
#include "ringtrain/train/weight_check.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/timer.hpp"

namespace ringtrain::train {
namespace {

std::vector<uint64_t> tensor_digests(backend::Backend& be,
                                     const std::vector<CheckedTensor>& tensors) {
  std::vector<const backend::Tensor*> pointers;
  for (const CheckedTensor& t : tensors) pointers.push_back(&t.tensor);
  return be.digests(pointers);
}

std::string differ_verb(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? " differs" : " differ";
}

}  // namespace

std::vector<CheckedTensor> checked_tensors(const nn::Model& model, const nn::Optimizer& optimizer,
                                           bool bn_statistics) {
  std::vector<CheckedTensor> out;
  const auto& params = model.parameters();
  for (const nn::Parameter* p : params) out.push_back({p->name, p->value});
  const auto& first = optimizer.first_moments();
  const auto& second = optimizer.second_moments();
  RT_CHECK(first.size() == params.size() && (second.empty() || second.size() == params.size()),
           "weight check: ", first.size(), " and ", second.size(), " moments for ", params.size(),
           " parameters");
  const char* first_name = second.empty() ? " (momentum)" : " (first moment)";
  for (size_t i = 0; i < params.size(); ++i)
    out.push_back({params[i]->name + first_name, first[i]});
  for (size_t i = 0; i < second.size(); ++i)
    out.push_back({params[i]->name + " (second moment)", second[i]});
  if (bn_statistics)
    for (const nn::NamedBuffer& b : model.buffers()) out.push_back({b.name, *b.tensor});
  return out;
}

uint64_t state_digest(const std::vector<uint64_t>& per_tensor, int64_t optimizer_steps) {
  uint64_t h = kDigestStart;
  for (uint64_t d : per_tensor) h = combine_digest(h, d);
  return combine_digest(h, mix64(uint64_t(optimizer_steps)));
}

std::string digest_hex(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, digest);
  return buf;
}

WeightCheck::WeightCheck(const CommConfig& config, const comm::Communicator& comm, nn::Model& model,
                         nn::Optimizer& optimizer, backend::Backend& be)
    : config_(config),
      comm_(comm),
      model_(model),
      optimizer_(optimizer),
      be_(be),
      bn_statistics_(config.sync_bn) {}

bool WeightCheck::due(int64_t step) const {
  return config_.verify_every > 0 && step % config_.verify_every == 0;
}

uint64_t WeightCheck::local_digest(bool bn_statistics) {
  return state_digest(tensor_digests(be_, checked_tensors(model_, optimizer_, bn_statistics)),
                      optimizer_.steps());
}

uint64_t WeightCheck::run(int64_t step) {
  Stopwatch clock;
  const std::vector<CheckedTensor> tensors = checked_tensors(model_, optimizer_, bn_statistics_);
  const uint64_t mine = state_digest(tensor_digests(be_, tensors), optimizer_.steps());
  const comm::DigestVote vote = comm::vote_on_digest(comm_, mine);
  CheckRecord record{step, vote.digests, 0, !vote.agreed};
  if (vote.agreed) {
    record.seconds = clock.seconds();
    records_.push_back(std::move(record));
    return mine;
  }
  // From here on every rank holds the same vote: the same line, the same decision.
  const std::string line = divergence_line(step, vote, tensors);
  if (config_.on_divergence != "repair" || !vote.majority) {
    const std::string kept = checkpoint_step_ >= 0
                                 ? str("the checkpoint of step ", checkpoint_step_, " is kept")
                                 : std::string("no checkpoint had been written");
    throw Error(str(line, "; stopped on every rank, ", kept,
                    config_.on_divergence == "repair"
                        ? str(" (comm.on_divergence = repair: ", comm_.size(),
                              " ranks hold no majority copy to repair from)")
                        : std::string(" (comm.on_divergence = stop)")));
  }
  repair_from(vote.reference, tensors);
  const comm::DigestVote after = comm::vote_on_digest(comm_, local_digest(bn_statistics_));
  if (!after.agreed)
    throw Error(str(line, "; the repair from rank ", vote.reference, " left ",
                    comm::rank_list(after.differing), " still different; stopped on every rank"));
  ++repairs_;
  if (comm_.rank() == 0)
    log::warn(str(line, "; repaired: rank ", vote.reference, "'s weights and optimizer state sent",
                  " to every rank, the run goes on (comm.on_divergence = repair; repair ", repairs_,
                  " of this run)"));
  record.seconds = clock.seconds();
  records_.push_back(std::move(record));
  return after.digests[0];
}

// "step 8: ranks hold different weights: rank 1 differs from the majority (ranks 0, 2) first in
// layer2.0.conv1.weight". Only on the failure path: one more allgather, of per-tensor digests.
std::string WeightCheck::divergence_line(int64_t step, const comm::DigestVote& vote,
                                         const std::vector<CheckedTensor>& tensors) {
  std::vector<uint64_t> mine = tensor_digests(be_, tensors);
  const size_t per_rank = mine.size();
  const std::vector<uint64_t> all = comm_.allgather(mine);
  const size_t first = comm::first_differing_tensor(all, per_rank, vote);
  const std::string where = first < per_rank ? tensors[first].name : "the optimizer's step count";
  const std::string against = vote.majority
                                  ? str("the majority (", comm::rank_list(vote.same), ")")
                                  : str(comm::rank_list(vote.same), ", with no majority of the ",
                                        comm_.size(), " ranks to say which is right,");
  return str("step ", step, ": ranks hold different weights: ", comm::rank_list(vote.differing),
             differ_verb(vote.differing), " from ", against, " first in ", where);
}

// The reference rank's tensors, packed into one buffer, broadcast, and unpacked on every rank
// (those that agreed too: one code path, and a repair is rare).
void WeightCheck::repair_from(int reference, const std::vector<CheckedTensor>& tensors) {
  size_t floats = 0;
  for (const CheckedTensor& t : tensors) floats += size_t(t.tensor.numel());
  std::vector<uint8_t> bytes;
  if (comm_.rank() == reference) {
    bytes.resize(floats * sizeof(float));
    auto* at = reinterpret_cast<float*>(bytes.data());
    for (const CheckedTensor& t : tensors) {
      be_.download(t.tensor, at);
      at += t.tensor.numel();
    }
  }
  comm_.broadcast(bytes, reference);
  RT_CHECK(bytes.size() == floats * sizeof(float), "weight repair: ", bytes.size(),
           " bytes received for ", floats, " values");
  const auto* at = reinterpret_cast<const float*>(bytes.data());
  for (const CheckedTensor& t : tensors) {
    backend::Tensor target = t.tensor;  // a handle to the same memory
    be_.upload(at, target);
    at += t.tensor.numel();
  }
  be_.synchronize();
}

io::WeightChecks weight_checks_record(const comm::Communicator& comm, const WeightCheck& check,
                                      const CommConfig& config) {
  std::vector<double> seconds;
  for (const CheckRecord& r : check.records()) seconds.push_back(r.seconds);
  std::vector<double> all = comm.gather_to_root(seconds);  // rank-major: [rank][check]
  io::WeightChecks out;
  if (comm.rank() != 0) return out;
  out.verify_every = config.verify_every;
  out.on_divergence = config.on_divergence;
  out.covers_bn = check.covers_bn_statistics();
  out.repairs = check.repairs();
  const size_t checks = check.records().size(), world = size_t(comm.size());
  for (size_t c = 0; c < checks; ++c) {
    const CheckRecord& r = check.records()[c];
    out.step.push_back(r.step);
    out.repaired.push_back(r.repaired ? 1 : 0);
    out.digest.insert(out.digest.end(), r.digests.begin(), r.digests.end());
    for (size_t rank = 0; rank < world; ++rank) out.seconds.push_back(all[rank * checks + c]);
  }
  return out;
}

void verify_resumed_weights(WeightCheck& check, const ResumePoint& loaded,
                            const std::string& path) {
  if (loaded.weights_digest.empty()) {
    log::info(str("--resume: ", path, " records no weight digest (written before the check): ",
                  "its weights are taken as they are"));
    return;
  }
  const std::string now = digest_hex(check.local_digest(loaded.weights_digest_covers_bn));
  if (now != loaded.weights_digest)
    throw InputError(str("--resume: ", path, ": the weights and optimizer state read have digest ",
                         now, ", but the ranks agreed on ", loaded.weights_digest,
                         " when it was written: the file changed or was damaged since; restore it "
                         "or move it away to start afresh"));
}

std::string flip_weight_bit(nn::Model& model, backend::Backend& be) {
  const auto& params = model.parameters();
  RT_CHECK(!params.empty(), "flip-weight fault: the model has no parameters");
  nn::Parameter& p = *params[params.size() / 2];
  std::vector<float> host(size_t(p.numel()));
  be.download(p.value, host.data());
  const size_t at = host.size() / 2;
  uint32_t bits;
  std::memcpy(&bits, &host[at], sizeof bits);
  bits ^= 1u << 16;
  std::memcpy(&host[at], &bits, sizeof bits);
  be.upload(host.data(), p.value);
  be.synchronize();
  return str("flipped bit 16 of ", p.name, "[", at, "]");
}

}  // namespace ringtrain::train

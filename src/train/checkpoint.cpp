// checkpoint.cpp — writing and reading checkpoints; a stop signal asks for one and a stop.
#include "ringtrain/train/checkpoint.hpp"

#include <unistd.h>

#include "ringtrain/core/log.hpp"
#include "ringtrain/core/stop_signals.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::train {
namespace {

constexpr const char* kFormat = "ringtrain-checkpoint";
constexpr int32_t kVersion = 1;

}  // namespace

CheckpointState::CheckpointState(const Config& config, const comm::Communicator& comm)
    : config_(config), comm_(comm) {}

bool CheckpointState::due(int64_t global_step) const {
  return config_.train.checkpoint_every > 0 && global_step % config_.train.checkpoint_every == 0;
}

bool CheckpointState::stop_requested() const {
  return !comm_.all_ok(StopSignals::stop_signal() == 0);
}

void CheckpointState::save(nn::Model& model, nn::Sgd& sgd, int64_t global_step) const {
  const std::string path = config_.checkpoint_path();
  if (comm_.rank() == 0) {
    h5::AtomicFile out(path);
    out.root().set_attr("format", kFormat);
    out.root().set_attr("format_version", kVersion);
    out.root().set_attr("global_step", global_step);
    out.root().set_attr("model", model.name());
    out.root().set_attr("world_size", int32_t(comm_.size()));
    out.root().write_string("deck", config_.effective_deck);
    h5::Group params = out.root().create_group("params");
    model.save(params);
    h5::Group optimizer = out.root().create_group("optimizer");
    sgd.save(optimizer);
    out.commit();
    log::info(str("checkpoint: step ", global_step, " -> ", path));
  }
  comm_.barrier();
}

ResumePoint CheckpointState::load(nn::Model& model, nn::Sgd& sgd) const {
  const std::string path = config_.checkpoint_path();
  if (access(path.c_str(), R_OK) != 0)
    throw InputError(
        str("--resume: no checkpoint at ", path, " (run without --resume to start afresh)"));
  h5::File file = h5::File::open_read(path);
  const h5::Group& root = file.root();
  if (!root.has_attr("format") || root.attr_string("format") != kFormat)
    throw InputError(str(path, ": not a ringtrain checkpoint"));
  if (root.attr<int32_t>("format_version") != kVersion)
    throw InputError(str(path, ": checkpoint format version ", root.attr<int32_t>("format_version"),
                         ", this ringtrain reads ", kVersion));
  if (root.attr_string("model") != model.name())
    throw InputError(str(path, ": checkpoint of model ", root.attr_string("model"),
                         ", the deck trains ", model.name()));
  model.load(root.open_group("params"));
  sgd.load(root.open_group("optimizer"));
  return ResumePoint{root.attr<int64_t>("global_step")};
}

}  // namespace ringtrain::train

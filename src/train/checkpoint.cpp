// checkpoint.cpp — writing and reading checkpoints; a stop signal asks for one and a stop.
#include "ringtrain/train/checkpoint.hpp"

#include <unistd.h>

#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/stop_signals.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::train {
namespace {

using io::kCheckpointFormat;
using io::kCheckpointVersion;

}  // namespace

CheckpointState::CheckpointState(const Config& config, const comm::Communicator& comm,
                                 int batch_per_rank)
    : config_(config), comm_(comm), batch_per_rank_(batch_per_rank) {}

bool CheckpointState::due(int64_t global_step) const {
  return config_.train.checkpoint_every > 0 && global_step % config_.train.checkpoint_every == 0;
}

bool CheckpointState::stop_requested() const {
  return !comm_.all_ok(StopSignals::stop_signal() == 0);
}

void CheckpointState::remove_stale_temp_files() const {
  if (comm_.rank() != 0) return;
  for (const std::string& path : {config_.checkpoint_path(), config_.results_path()})
    for (const std::string& removed : ringtrain::remove_stale_temp_files(path))
      log::info(str("removed ", removed, ", left by a run that died while writing it"));
}

void CheckpointState::save(nn::Model& model, nn::Optimizer& optimizer, int64_t global_step,
                           const io::ModelCard& card, const LossScaler* scaler,
                           const comm::fusion::TuneSettings* tuned, nn::WeightAverage* ema) const {
  const std::string path = config_.checkpoint_path();
  // Every rank's BN running statistics (they differ between ranks until an epoch's end).
  std::vector<float> mine = model.buffer_values();
  std::vector<double> all = comm_.gather_to_root(std::vector<double>(mine.begin(), mine.end()));
  if (comm_.rank() == 0) {
    h5::AtomicFile out(path);
    h5::Group& root = out.root();
    root.set_attr("format", kCheckpointFormat);
    root.set_attr("format_version", kCheckpointVersion);
    root.set_attr("global_step", global_step);
    io::write_model_card(root, card);  // `model` among the rest inference needs
    root.set_attr("world_size", int32_t(comm_.size()));
    root.set_attr("batch_per_rank", int32_t(batch_per_rank_));
    root.set_attr("accumulate_steps", int32_t(config_.train.accumulate_steps));
    root.set_attr("seed", int64_t(config_.train.seed));
    root.set_attr("written_at", utc_now());
    root.write_string("deck", config_.effective_deck);
    if (scaler && scaler->dynamic()) {
      root.set_attr("loss_scale", scaler->state().scale);
      root.set_attr("loss_scale_clean_steps", scaler->state().clean_steps);
    }
    if (!weights_digest_.empty()) {
      root.set_attr("weights_digest", weights_digest_);
      root.set_attr("weights_digest_covers_bn", int32_t(weights_digest_covers_bn_));
    }
    if (tuned) {
      root.set_attr("autotune_overlap", int32_t(tuned->overlap));
      root.set_attr("autotune_fusion_mib", tuned->fusion_mib);
    }
    const std::string weight_grads = model.weight_grad_choices();
    if (!weight_grads.empty()) root.set_attr("conv_weight_grad_choices", weight_grads);
    h5::Group params = root.create_group("params");
    model.save(params);
    h5::Group state = root.create_group("optimizer");
    optimizer.save(state);
    if (ema) {
      h5::Group averages = root.create_group("ema");
      ema->save(averages);
    }
    if (!mine.empty()) {
      std::vector<float> rows(all.begin(), all.end());
      root.write("rank_buffers", h5::Dims{hsize_t(comm_.size()), hsize_t(mine.size())}, rows.data())
          .set_attr("description",
                    "every rank's model buffers (BN running statistics), a row a rank");
    }
    out.commit();
    log::info(str("checkpoint: step ", global_step, " -> ", path));
  }
  comm_.barrier();
}

namespace {

// One warning line for each setting that differs from the checkpoint's: the run resumes,
// but not as the same run (the data order depends on world size, batch and seed).
void warn_on_changes(const h5::Group& root, const std::string& path, int world_size,
                     int batch_per_rank, const Config& config) {
  auto differs = [&](const char* what, int64_t then, int64_t now) {
    if (then != now && log::is_root())
      log::warn(str("--resume: ", path, " was written with ", what, " ", then, ", this run has ",
                    now, ": the run goes on, but not as the interrupted run would have"));
  };
  differs("world size", root.attr<int32_t>("world_size"), world_size);
  if (root.has_attr("batch_per_rank"))
    differs("batch per rank", root.attr<int32_t>("batch_per_rank"), batch_per_rank);
  if (root.has_attr("accumulate_steps"))
    differs("accumulate_steps", root.attr<int32_t>("accumulate_steps"),
            config.train.accumulate_steps);
  if (root.has_attr("seed")) differs("seed", root.attr<int64_t>("seed"), config.train.seed);
}

}  // namespace

ResumePoint CheckpointState::load(nn::Model& model, nn::Optimizer& optimizer, LossScaler* scaler,
                                  nn::WeightAverage* ema) const {
  const std::string path = config_.checkpoint_path();
  if (access(path.c_str(), R_OK) != 0)
    throw InputError(
        str("--resume: no checkpoint at ", path, " (run without --resume to start afresh)"));
  if (!h5::is_hdf5(path))
    throw InputError(str("--resume: ", path,
                         " is not an HDF5 file (damaged or not a checkpoint): move it away to "
                         "start afresh"));
  h5::File file = h5::File::open_read(path);
  const h5::Group& root = file.root();
  if (!root.has_attr("format") || root.attr_string("format") != kCheckpointFormat)
    throw InputError(str(path, ": not a ringtrain checkpoint"));
  const int32_t version = root.attr<int32_t>("format_version");
  if (version < io::kOldestCheckpointVersion || version > kCheckpointVersion)
    throw InputError(str(path, ": checkpoint format version ", version, ", this ringtrain reads ",
                         io::kOldestCheckpointVersion, " to ", kCheckpointVersion));
  if (root.attr_string("model") != model.name())
    throw InputError(str(path, ": checkpoint of model ", root.attr_string("model"),
                         ", the deck trains ", model.name()));
  // Version 1 had no heads: those were class heads.
  const std::string heads = root.has_attr("heads") ? root.attr_string("heads") : "class";
  if (heads != nn::heads_name(model.heads()))
    throw InputError(str(path, ": checkpoint of model.heads = ", heads, ", the deck trains ",
                         nn::heads_name(model.heads())));
  const int64_t step = root.attr<int64_t>("global_step");
  const int world = root.attr<int32_t>("world_size");
  log::info(str(
      "--resume: ", path, ": step ", step, " of ", model.name(), ", written by ", world, " rank(s)",
      root.has_attr("written_at") ? " at " + root.attr_string("written_at") : std::string()));
  warn_on_changes(root, path, comm_.size(), batch_per_rank_, config_);
  model.load(root.open_group("params"));
  optimizer.load(root.open_group("optimizer"));
  if (scaler && scaler->dynamic() && root.has_attr("loss_scale"))
    scaler->restore(LossScaleState{root.attr<double>("loss_scale"),
                                   root.attr<int64_t>("loss_scale_clean_steps")});
  if (world == comm_.size() && root.exists("rank_buffers")) {
    const std::vector<float> rows = root.open_dataset("rank_buffers").read_all<float>();
    const size_t n = rows.size() / size_t(world);
    const auto row = rows.begin() + std::ptrdiff_t(n * size_t(comm_.rank()));
    model.set_buffer_values(std::vector<float>(row, row + std::ptrdiff_t(n)));
  }
  // The timed choices the run had agreed on: the resumed run computes as the uninterrupted one
  // would (paths take effect with train.conv_weight_grad = measure, algorithms with
  // train.conv_algorithm = measure).
  const bool weight_grads_preset = root.has_attr("conv_weight_grad_choices");
  if (weight_grads_preset)
    model.preset_weight_grad_choices(root.attr_string("conv_weight_grad_choices"), path);
  if (ema && root.exists("ema"))
    ema->load(root.open_group("ema"));
  else if (ema)
    ema->reset();
  ResumePoint point;
  point.global_step = step;
  point.weight_grads_preset = weight_grads_preset;
  if (root.has_attr("weights_digest")) {
    point.weights_digest = root.attr_string("weights_digest");
    point.weights_digest_covers_bn = root.attr<int32_t>("weights_digest_covers_bn") != 0;
  }
  if (root.has_attr("pass_threshold")) point.pass_threshold = root.attr<float>("pass_threshold");
  if (root.has_attr("autotune_overlap") && root.has_attr("autotune_fusion_mib"))
    point.tuned = comm::fusion::TuneSettings{root.attr<int32_t>("autotune_overlap") != 0,
                                             root.attr<double>("autotune_fusion_mib")};
  return point;
}

}  // namespace ringtrain::train

// checkpoint.hpp — periodic and signal-triggered checkpoints, and resuming from them.
//
// A checkpoint is one HDF5 file, written atomically and durably by rank 0 (h5::AtomicFile), and
// the model file prediction reads (io/model_file.hpp: the card's attributes beside these):
// /params (weights and rank 0's BN statistics), /optimizer (momentum buffers, step count),
// /rank_buffers (every rank's BN statistics), and as attributes the global step and what
// the run was (world size, batch per rank, accumulation, seed), which --resume compares. With
// dynamic loss scaling, the scale and its clean-step count too (loss_scale,
// loss_scale_clean_steps), so a resumed run grows and backs off as the uninterrupted one. The data
// position needs nothing more: the loader's order is a pure function of (seed, epoch), so step g is
// batch g mod steps_per_epoch of epoch g / steps_per_epoch + 1. The autotune's choice
// (autotune_overlap, autotune_fusion_mib), once made, so that a resumed run does not search again.
// The weight digest every rank agreed on just before the write (weights_digest, hex, and
// weights_digest_covers_bn), which --resume recomputes from what it loaded.
#pragma once

#include <cstdint>
#include <optional>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/autotune.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/io/model_file.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/nn/weight_average.hpp"
#include "ringtrain/train/loss_scale.hpp"

namespace ringtrain::train {

struct ResumePoint {
  int64_t global_step = 0;
  std::optional<float> pass_threshold;  // the checkpoint's, when it has inspection heads
  std::optional<comm::fusion::TuneSettings> tuned;  // the autotune's choice, when it had made one
  // The ranks' agreed weight digest when it was written (train/weight_check.hpp), hex, and
  // whether it covers the BN statistics; empty: a checkpoint from before the check.
  std::string weights_digest;
  bool weights_digest_covers_bn = false;
  // The model took the checkpoint's timed choices: paths, algorithms (Model::weight_grad_choices).
  bool weight_grads_preset = false;
};

class CheckpointState {
 public:
  CheckpointState(const Config& config, const comm::Communicator& comm, int batch_per_rank);

  // Rank 0 removes temp files of the checkpoint and results file left by dead runs.
  void remove_stale_temp_files() const;

  // True when train.checkpoint_every says step is due.
  bool due(int64_t global_step) const;
  // Collective: true on every rank when any rank has received a stop signal
  // (core/stop_signals.hpp: SIGTERM, SIGUSR1 or SIGINT).
  bool stop_requested() const;
  // Collective: rank 0 writes the checkpoint atomically, with every rank's BN statistics,
  // the model card (what inference needs), a dynamic scaler's state (scaler may be null) and the
  // autotune's choice (tuned: null when none was made) and the weight averages in /ema (ema:
  // null with train.ema_decay = 0; a model group, so predict and rt-export can load them).
  void save(nn::Model& model, nn::Optimizer& optimizer, int64_t global_step,
            const io::ModelCard& card, const LossScaler* scaler = nullptr,
            const comm::fusion::TuneSettings* tuned = nullptr,
            nn::WeightAverage* ema = nullptr) const;
  // Every rank reads the checkpoint, format version 1 or 2 (its own BN statistics when the world
  // size is the same); errors name the file and say how to start afresh; settings that differ from
  // the checkpoint's are warned about. A dynamic scaler (may be null) takes the checkpoint's scale
  // and clean-step count when it has them, else keeps its start. The averages (ema, may be null)
  // are read from /ema; a checkpoint without them starts them from the loaded weights.
  ResumePoint load(nn::Model& model, nn::Optimizer& optimizer, LossScaler* scaler = nullptr,
                   nn::WeightAverage* ema = nullptr) const;
  // The digest the next save() records (the weight check's, taken just before it).
  void set_weights_digest(const std::string& hex, bool covers_bn) {
    weights_digest_ = hex;
    weights_digest_covers_bn_ = covers_bn;
  }

 private:
  const Config& config_;
  const comm::Communicator& comm_;
  int batch_per_rank_;
  std::string weights_digest_;
  bool weights_digest_covers_bn_ = false;
};

}  // namespace ringtrain::train

// memory_ledger.hpp — tensor memory booked by what took it (the kind of op running, cuDNN's
// workspace, or no op: parameters, gradients, momentum, a step's inputs) and each one's share
// at the peak: where a step's memory goes (rt-bench-compute --memory-map).
#pragma once

#include <array>
#include <cstddef>

#include "ringtrain/backend/op_kind.hpp"

namespace ringtrain::backend {

// A tag is an OpKind's value, or one of these two.
constexpr int kWorkspaceTag = kOpKinds;       // cuda: a cuDNN call's workspace (Context::workspace)
constexpr int kOutsideOpsTag = kOpKinds + 1;  // taken while no tagged op ran
constexpr int kMemoryTags = kOpKinds + 2;

// op_kind_key's for op kinds, then "workspace" and "outside_ops".
const char* memory_tag_key(int tag);

// The tag memory taken on this thread now goes under: kOutsideOpsTag unless a scope set one.
int current_memory_tag();

// Memory taken on this thread while the scope lives goes under `tag` (the profiled backend
// sets each op's kind, Context::workspace its own); the tag before comes back after.
class MemoryTagScope {
 public:
  explicit MemoryTagScope(int tag);
  ~MemoryTagScope();
  MemoryTagScope(const MemoryTagScope&) = delete;
  MemoryTagScope& operator=(const MemoryTagScope&) = delete;

 private:
  int previous_;
};

// Bytes and blocks by tag.
struct MemoryByTag {
  std::array<size_t, kMemoryTags> bytes{};
  std::array<size_t, kMemoryTags> blocks{};
  size_t total_bytes() const;
};

// What is in use by tag, the most in use at once, and how that most was split the first
// moment it was reached. Its owner locks: a ledger is not thread-safe.
class MemoryLedger {
 public:
  void take(int tag, size_t bytes);
  void give(int tag, size_t bytes) noexcept;  // a tag take() had
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  const MemoryByTag& now() const { return now_; }
  const MemoryByTag& at_peak() const { return at_peak_; }
  // The peak starts again from what is in use now.
  void reset_peak();

 private:
  MemoryByTag now_, at_peak_;
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace ringtrain::backend

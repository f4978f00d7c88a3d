// memory_ledger.cpp — the memory ledger's books and the thread's current tag.
#include "ringtrain/backend/memory_ledger.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {
namespace {
thread_local int current_tag = kOutsideOpsTag;

void check_tag(int tag) {
  RT_CHECK(tag >= 0 && tag < kMemoryTags, "memory ledger: no tag ", tag);
}
}  // namespace

const char* memory_tag_key(int tag) {
  check_tag(tag);
  if (tag == kWorkspaceTag) return "workspace";
  if (tag == kOutsideOpsTag) return "outside_ops";
  return op_kind_key(OpKind(tag));
}

int current_memory_tag() {
  return current_tag;
}

MemoryTagScope::MemoryTagScope(int tag) : previous_(current_tag) {
  check_tag(tag);
  current_tag = tag;
}

MemoryTagScope::~MemoryTagScope() {
  current_tag = previous_;
}

size_t MemoryByTag::total_bytes() const {
  size_t total = 0;
  for (size_t b : bytes) total += b;
  return total;
}

void MemoryLedger::take(int tag, size_t bytes) {
  check_tag(tag);
  now_.bytes[size_t(tag)] += bytes;
  now_.blocks[size_t(tag)] += 1;
  in_use_ += bytes;
  if (in_use_ > peak_) {
    peak_ = in_use_;
    at_peak_ = now_;
  }
}

// Called from deleters, so it does not throw: the tag is the one take() checked.
void MemoryLedger::give(int tag, size_t bytes) noexcept {
  now_.bytes[size_t(tag)] -= bytes;
  now_.blocks[size_t(tag)] -= 1;
  in_use_ -= bytes;
}

void MemoryLedger::reset_peak() {
  peak_ = in_use_;
  at_peak_ = now_;
}

}  // namespace ringtrain::backend

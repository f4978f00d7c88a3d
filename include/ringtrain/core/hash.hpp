// hash.hpp — FNV-1a (64 bit), our one hash: fingerprints that ranks compare (comm/agreement.hpp)
// and seeds taken from names (nn/init.cpp). Not for security: for telling texts apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringtrain {

// Fed piece by piece; the value is the same on every platform for the same bytes. The start
// value is FNV's published offset basis, 14695981039346656037, without its last digit: so it
// stood in each of the three copies this class replaces, and the seeds of every run's initial
// weights (nn/init.cpp) come from it, so it stays. The mixing is FNV-1a's.
class Fnv1a {
 public:
  Fnv1a& add(const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      h_ ^= static_cast<const unsigned char*>(data)[i];
      h_ *= 1099511628211ull;
    }
    return *this;
  }
  Fnv1a& add(const std::string& text) { return add(text.data(), text.size()); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

inline uint64_t fnv1a(const std::string& text) {
  return Fnv1a().add(text).value();
}

}  // namespace ringtrain

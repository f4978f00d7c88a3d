// fusion_switch.cpp — fusion_allowed: one environment variable read, checked.
#include "fusion_switch.hpp"

#include <cstdlib>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {

bool fusion_allowed(const char* variable) {
  const char* setting = std::getenv(variable);
  const std::string value = setting ? setting : "fused";
  RT_REQUIRE_INPUT(value == "fused" || value == "separate", variable, "=", value,
                   ": use fused (the default) or separate");
  return value == "fused";
}

}  // namespace ringtrain::backend

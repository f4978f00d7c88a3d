// fusion_switch.cpp — fusion_allowed and env_switch: one environment variable read, checked.
#include "fusion_switch.hpp"

#include <cstdlib>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {

bool env_switch(const char* variable, const char* usual, const char* other) {
  const char* setting = std::getenv(variable);
  const std::string value = setting ? setting : usual;
  RT_REQUIRE_INPUT(value == usual || value == other, variable, "=", value, ": use ", usual,
                   " (the default) or ", other);
  return value == other;
}

bool fusion_allowed(const char* variable) {
  return !env_switch(variable, "fused", "separate");
}

}  // namespace ringtrain::backend

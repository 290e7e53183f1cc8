// Byte counts as text, for CLI output, progress bars and logs.
#pragma once

#include <cstdint>
#include <string>

namespace orrery {

// "12 B", "1.5 KiB", "3.0 GiB" (binary units, one decimal above bytes).
std::string HumanBytes(uint64_t bytes);

}  // namespace orrery

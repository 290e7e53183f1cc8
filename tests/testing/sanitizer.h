// Whether this test binary is built with AddressSanitizer: CI's sanitizer
// stage runs the unit tests in a Debug build some 30x slower than release, so
// a test that sweeps or plans at size runs a smaller case there (for memory
// and undefined-behaviour errors) and the release unit stage checks the
// figure at full size.
#pragma once

namespace orrery::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace orrery::testing

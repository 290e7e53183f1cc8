// Wall-clock times as text, for status fields, reports and caches. Kept apart
// from clock.h, which nearly every file includes.
#pragma once

#include <ctime>
#include <string>

namespace orrery {

// `t` as RFC 3339 in UTC, to the second: "2026-11-23T04:40:52Z".
std::string Rfc3339Utc(std::time_t t);

}  // namespace orrery

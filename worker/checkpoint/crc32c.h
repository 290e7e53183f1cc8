// CRC-32C (Castagnoli), the checksum recorded for every block of every shard file.
// Implemented here (no third-party dependency): the SSE4.2 crc32 instruction when
// the CPU has it, a slice-by-8 table otherwise; both give identical values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace orrery::checkpoint {

// Extends `crc` (0 for a fresh checksum) over `size` bytes at `data`.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
// The portable table path alone, so a test can check it against the hardware path.
uint32_t Crc32cExtendSoftwareForTest(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

}  // namespace orrery::checkpoint

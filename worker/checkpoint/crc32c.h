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

// CRC-32C is affine over GF(2), so the checksum of a block can be assembled
// from pieces read by different ranks without any rank reading the whole
// block: a piece of `size` bytes followed by `bytes_after` more bytes of the
// block contributes Crc32cFragmentTerm(piece, size, bytes_after), and for
// pieces that tile a block of `length` bytes exactly once,
//   Crc32c(block) == Crc32cFromTerms(XOR of the pieces' terms, length).
uint32_t Crc32cFragmentTerm(const void* data, size_t size, uint64_t bytes_after);
uint32_t Crc32cFromTerms(uint32_t xor_of_terms, uint64_t length);
// The register `state` after `zero_bytes` zero bytes (multiplication by
// x^(8·zero_bytes) modulo the polynomial; logarithmic in zero_bytes).
uint32_t Crc32cShift(uint32_t state, uint64_t zero_bytes);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

}  // namespace orrery::checkpoint

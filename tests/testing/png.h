// A small PNG decoder for tests that check screenshots pixel by pixel (the run
// report rendered by headless Chromium). It reads what browsers write: 8-bit RGB
// or RGBA, not interlaced, any of the five row filters; ancillary chunks are
// skipped. Anything else is an error, not a guess.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::testing {

struct Rgba {
  uint8_t r = 0, g = 0, b = 0, a = 255;
  bool operator==(const Rgba&) const = default;
};

struct Image {
  int width = 0;
  int height = 0;
  std::vector<Rgba> pixels;  // row-major, width * height

  const Rgba& At(int x, int y) const {
    return pixels[static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)];
  }
};

// Decodes the bytes of a PNG file.
StatusOr<Image> DecodePng(const std::string& bytes);
// Reads and decodes a PNG file.
StatusOr<Image> ReadPng(const std::string& path);

// Parses "#rrggbb" (as the report's TaskColour returns); opaque.
StatusOr<Rgba> ParseHexColour(const std::string& hex);

}  // namespace orrery::testing

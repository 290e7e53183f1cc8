// PNG decoding (see png.h): chunks are checked against their CRC, the IDAT
// stream is inflated with zlib in one go (its size is known from the header), and
// each row is unfiltered in place against the row above.
#include "tests/testing/png.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace orrery::testing {
namespace {

constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

uint32_t ReadBe32(const unsigned char* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}

int Paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a);
  const int pb = std::abs(p - b);
  const int pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  if (pb <= pc) return b;
  return c;
}

// Reverses the row filters in place. `data` holds, per row, the filter byte then
// `stride` filtered bytes; `bpp` is bytes per pixel (the "left" distance).
Status Unfilter(std::vector<unsigned char>& data, size_t height, size_t stride, size_t bpp) {
  const std::vector<unsigned char> zero_row(stride, 0);
  const unsigned char* prev = zero_row.data();
  for (size_t y = 0; y < height; ++y) {
    unsigned char* row_start = data.data() + y * (stride + 1);
    const int filter = row_start[0];
    unsigned char* row = row_start + 1;
    for (size_t x = 0; x < stride; ++x) {
      const int left = x >= bpp ? row[x - bpp] : 0;
      const int up = prev[x];
      const int up_left = x >= bpp ? prev[x - bpp] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = left; break;
        case 2: predictor = up; break;
        case 3: predictor = (left + up) / 2; break;
        case 4: predictor = Paeth(left, up, up_left); break;
        default:
          return InvalidArgumentError("png: row " + std::to_string(y) + " has unknown filter " +
                                      std::to_string(filter));
      }
      row[x] = static_cast<unsigned char>((row[x] + predictor) & 0xff);
    }
    prev = row;
  }
  return OkStatus();
}

}  // namespace

StatusOr<Image> DecodePng(const std::string& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  if (n < 8 || std::memcmp(p, kSignature, 8) != 0) {
    return InvalidArgumentError("png: bad signature");
  }
  uint32_t width = 0, height = 0;
  int colour_type = -1;
  bool seen_header = false, seen_end = false;
  std::string idat;
  for (size_t pos = 8; pos < n && !seen_end;) {
    if (n - pos < 12)
      return InvalidArgumentError("png: truncated chunk at byte " + std::to_string(pos));
    const uint32_t length = ReadBe32(p + pos);
    if (length > n - pos - 12) {
      return InvalidArgumentError("png: chunk at byte " + std::to_string(pos) +
                                  " runs past the end");
    }
    const std::string type(reinterpret_cast<const char*>(p + pos + 4), 4);
    const unsigned char* body = p + pos + 8;
    const uint32_t crc = ReadBe32(body + length);
    const uLong actual_crc = crc32(crc32(0L, Z_NULL, 0), p + pos + 4, length + 4);
    if (crc != actual_crc) return InvalidArgumentError("png: bad CRC in chunk " + type);
    if (type == "IHDR") {
      if (length != 13)
        return InvalidArgumentError("png: IHDR has length " + std::to_string(length));
      width = ReadBe32(body);
      height = ReadBe32(body + 4);
      const int bit_depth = body[8];
      colour_type = body[9];
      const int compression = body[10], filter_method = body[11], interlace = body[12];
      if (bit_depth != 8) {
        return UnimplementedError("png: bit depth " + std::to_string(bit_depth) + " (only 8)");
      }
      if (colour_type != 2 && colour_type != 6) {
        return UnimplementedError("png: colour type " + std::to_string(colour_type) +
                                  " (only RGB and RGBA)");
      }
      if (compression != 0 || filter_method != 0) {
        return InvalidArgumentError("png: unknown compression or filter method");
      }
      if (interlace != 0) return UnimplementedError("png: interlaced images");
      if (width == 0 || height == 0 || width > (1u << 15) || height > (1u << 15)) {
        return InvalidArgumentError("png: size " + std::to_string(width) + "x" +
                                    std::to_string(height) + " out of range");
      }
      seen_header = true;
    } else if (type == "IDAT") {
      if (!seen_header) return InvalidArgumentError("png: IDAT before IHDR");
      idat.append(reinterpret_cast<const char*>(body), length);
    } else if (type == "IEND") {
      seen_end = true;
    } else if ((type[0] & 0x20) == 0 && type != "PLTE") {
      // Upper-case first letter: critical, and we do not know how to read it.
      return UnimplementedError("png: unknown critical chunk " + type);
    }
    pos += 12 + length;
  }
  if (!seen_header) return InvalidArgumentError("png: no IHDR");
  if (!seen_end) return InvalidArgumentError("png: no IEND (truncated)");

  const size_t bpp = colour_type == 6 ? 4 : 3;
  const size_t stride = static_cast<size_t>(width) * bpp;
  const size_t expected = (stride + 1) * height;
  std::vector<unsigned char> raw(expected);
  uLongf raw_size = expected;
  const int rc =
      uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size());
  if (rc != Z_OK)
    return InvalidArgumentError("png: inflating IDAT failed: zlib " + std::to_string(rc));
  if (raw_size != expected) {
    return InvalidArgumentError("png: image data has " + std::to_string(raw_size) +
                                " bytes, expected " + std::to_string(expected));
  }
  ORRERY_RETURN_IF_ERROR(Unfilter(raw, height, stride, bpp));

  Image image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  image.pixels.resize(static_cast<size_t>(width) * height);
  for (size_t y = 0; y < height; ++y) {
    const unsigned char* row = raw.data() + y * (stride + 1) + 1;
    for (size_t x = 0; x < width; ++x) {
      const unsigned char* px = row + x * bpp;
      image.pixels[y * width + x] = Rgba{px[0], px[1], px[2], bpp == 4 ? px[3] : uint8_t{255}};
    }
  }
  return image;
}

StatusOr<Image> ReadPng(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("png: cannot open " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  auto image = DecodePng(buffer.str());
  if (!image.ok()) return image.status().WithContext(path);
  return image;
}

StatusOr<Rgba> ParseHexColour(const std::string& hex) {
  const auto bad = [&] { return InvalidArgumentError("colour: want #rrggbb, got " + hex); };
  if (hex.size() != 7 || hex[0] != '#') return bad();
  const auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int v[6];
  for (size_t i = 0; i < 6; ++i) {
    v[i] = digit(hex[i + 1]);
    if (v[i] < 0) return bad();
  }
  return Rgba{static_cast<uint8_t>(v[0] * 16 + v[1]), static_cast<uint8_t>(v[2] * 16 + v[3]),
              static_cast<uint8_t>(v[4] * 16 + v[5]), 255};
}

}  // namespace orrery::testing

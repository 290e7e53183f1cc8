// Tests for the test-only PNG decoder (tests/testing/png.h) the report screenshot
// test relies on: a PNG Chromium wrote, images encoded here with every row filter,
// and the damaged or unsupported files it must refuse.
#include "tests/testing/png.h"

#include <zlib.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace orrery::testing {
namespace {

// ---- A minimal encoder, written independently of the decoder's unfiltering ----

void PutBe32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

void PutChunk(std::string& out, const std::string& type, const std::string& body) {
  PutBe32(out, static_cast<uint32_t>(body.size()));
  const std::string typed = type + body;
  out += typed;
  PutBe32(out, static_cast<uint32_t>(
                   crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())));
}

std::string Header(uint32_t w, uint32_t h, int depth, int colour_type, int interlace) {
  std::string ihdr;
  PutBe32(ihdr, w);
  PutBe32(ihdr, h);
  ihdr += static_cast<char>(depth);
  ihdr += static_cast<char>(colour_type);
  ihdr += '\0';  // compression
  ihdr += '\0';  // filter method
  ihdr += static_cast<char>(interlace);
  return ihdr;
}

// Filters row y with filter type `f` per the PNG specification (predict, subtract).
std::vector<uint8_t> FilterRow(const std::vector<uint8_t>& row, const std::vector<uint8_t>& prior,
                               int f, size_t bpp) {
  std::vector<uint8_t> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) {
    const int a = i >= bpp ? row[i - bpp] : 0;
    const int b = prior[i];
    const int c = i >= bpp ? prior[i - bpp] : 0;
    int pred = 0;
    if (f == 1) pred = a;
    if (f == 2) pred = b;
    if (f == 3) pred = (a + b) >> 1;
    if (f == 4) {
      const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
      pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
    }
    out[i] = static_cast<uint8_t>(row[i] - pred);
  }
  return out;
}

// Encodes `img`; row y uses filter y % 5 so every filter is exercised, and the
// compressed stream is split over two IDAT chunks.
std::string Encode(const Image& img, bool alpha) {
  const size_t bpp = alpha ? 4 : 3;
  const size_t stride = static_cast<size_t>(img.width) * bpp;
  std::string raw;
  std::vector<uint8_t> prior(stride, 0);
  for (int y = 0; y < img.height; ++y) {
    std::vector<uint8_t> row;
    for (int x = 0; x < img.width; ++x) {
      const Rgba& p = img.At(x, y);
      row.insert(row.end(), {p.r, p.g, p.b});
      if (alpha) row.push_back(p.a);
    }
    const int f = y % 5;
    raw += static_cast<char>(f);
    for (uint8_t v : FilterRow(row, prior, f, bpp)) raw += static_cast<char>(v);
    prior = row;
  }
  uLongf size = compressBound(raw.size());
  std::string z(size, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &size,
                      reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 9),
            Z_OK);
  z.resize(size);
  std::string png("\x89PNG\r\n\x1a\n", 8);
  PutChunk(png, "IHDR", Header(img.width, img.height, 8, alpha ? 6 : 2, 0));
  PutChunk(png, "tEXt", std::string("Comment\0ignored", 15));
  PutChunk(png, "IDAT", z.substr(0, z.size() / 2));
  PutChunk(png, "IDAT", z.substr(z.size() / 2));
  PutChunk(png, "IEND", "");
  return png;
}

Image Noise(int w, int h, bool alpha, uint32_t seed) {
  std::mt19937 rng(seed);
  Image img{w, h, {}};
  for (int i = 0; i < w * h; ++i) {
    // Mostly smooth with jumps, so predictors see both small and large residuals.
    const auto v = [&] { return static_cast<uint8_t>(rng() % 4 == 0 ? rng() : (i * 7) & 0xff); };
    img.pixels.push_back({v(), v(), v(), alpha ? v() : uint8_t{255}});
  }
  return img;
}

TEST(Png, DecodesEveryFilterRgb) {
  const Image img = Noise(37, 23, false, 1);
  auto back = DecodePng(Encode(img, false));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->width, 37);
  EXPECT_EQ(back->height, 23);
  EXPECT_EQ(back->pixels, img.pixels);
}

TEST(Png, DecodesEveryFilterRgba) {
  const Image img = Noise(16, 11, true, 2);
  auto back = DecodePng(Encode(img, true));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pixels, img.pixels);
}

// Written by `chromium --headless --screenshot --window-size=96,64` of a page with
// a #3366cc background and a 48x32 #ff9900 box at the top left.
TEST(Png, DecodesAChromiumScreenshot) {
  auto img = ReadPng(std::string(ORRERY_SOURCE_DIR) +
                     "/tests/operator/local/testdata/chromium_two_colours.png");
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->width, 96);
  ASSERT_EQ(img->height, 64);
  const Rgba orange{0xff, 0x99, 0x00, 255}, blue{0x33, 0x66, 0xcc, 255};
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 96; ++x) {
      ASSERT_EQ(img->At(x, y), x < 48 && y < 32 ? orange : blue) << "at " << x << "," << y;
    }
  }
}

Status DecodeError(const std::string& png) {
  auto r = DecodePng(png);
  return r.ok() ? OkStatus() : r.status();
}

TEST(Png, RefusesDamagedFiles) {
  const std::string good = Encode(Noise(8, 8, false, 3), false);
  EXPECT_NE(DecodeError("GIF89a").message().find("signature"), std::string::npos);
  std::string bad_crc = good;
  bad_crc[8 + 8 + 3] ^= 1;  // a byte of the IHDR body
  EXPECT_NE(DecodeError(bad_crc).message().find("CRC"), std::string::npos);
  EXPECT_FALSE(DecodePng(good.substr(0, good.size() - 20)).ok());
  EXPECT_FALSE(DecodePng(good.substr(0, good.size() - 12)).ok());  // no IEND
}

TEST(Png, RefusesWhatItDoesNotSupport) {
  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string sixteen_bit = png;
  PutChunk(sixteen_bit, "IHDR", Header(4, 4, 16, 2, 0));
  EXPECT_EQ(DecodeError(sixteen_bit).code(), StatusCode::kUnimplemented);
  std::string palette = png;
  PutChunk(palette, "IHDR", Header(4, 4, 8, 3, 0));
  EXPECT_EQ(DecodeError(palette).code(), StatusCode::kUnimplemented);
  std::string interlaced = png;
  PutChunk(interlaced, "IHDR", Header(4, 4, 8, 2, 1));
  EXPECT_EQ(DecodeError(interlaced).code(), StatusCode::kUnimplemented);
}

TEST(Png, RefusesAnUnknownRowFilter) {
  std::string raw(1 + 3, '\0');
  raw[0] = 5;  // filters are 0..4
  uLongf size = compressBound(raw.size());
  std::string z(size, '\0');
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &size,
                      reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 9),
            Z_OK);
  z.resize(size);
  std::string png("\x89PNG\r\n\x1a\n", 8);
  PutChunk(png, "IHDR", Header(1, 1, 8, 2, 0));
  PutChunk(png, "IDAT", z);
  PutChunk(png, "IEND", "");
  EXPECT_NE(DecodeError(png).message().find("filter 5"), std::string::npos);
}

TEST(Png, ParsesHexColours) {
  auto c = ParseHexColour("#1f77b4");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (Rgba{0x1f, 0x77, 0xb4, 255}));
  EXPECT_FALSE(ParseHexColour("1f77b4").ok());
  EXPECT_FALSE(ParseHexColour("#1f77bz").ok());
  EXPECT_FALSE(ParseHexColour("#-1-1-1").ok());
}

}  // namespace
}  // namespace orrery::testing

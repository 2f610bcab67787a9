// Synthetic KV-cache data: a deterministic stand-in for a KV-cache block, laid
// out token-major ([tokens][channels]), and the float conversions it needs.
// Channel c has a scale drawn log-uniform in [0.1, 10] and a mean offset; about
// 1% of channels are outliers with a 20x larger scale; along tokens each channel
// is an AR(1) process (correlation `token_correlation`), as activations of
// neighbouring tokens are. It models the statistics that matter to a byte-plane
// coder (how spread the exponents are per channel), not any particular model.
// Used by the codec tests and benchmarks (kv_data_testing.h adds real weights)
// and by tools that put KV-like values (mooncake_bench --value_data=bf16).
//
// Conversions to bf16/fp16/fp8 round to nearest even and saturate at the largest
// finite value. Everything here is deterministic for a given seed (own RNG and
// Box-Muller; no std:: distributions, whose output differs between standard
// libraries).
#ifndef MOONCAKE_COMPRESS_SYNTHETIC_KV_H_
#define MOONCAKE_COMPRESS_SYNTHETIC_KV_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/compress/codec.h"

namespace mooncake::compress {

inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// Round-to-nearest-even into a sign/exp_bits/man_bits float; saturates at max_finite.
inline uint32_t FloatToMinifloat(float f, int exp_bits, int man_bits, double max_finite,
                                 uint32_t nan_bits) {
  const uint32_t sign = std::signbit(f) ? 1u << (exp_bits + man_bits) : 0;
  if (std::isnan(f)) return sign | nan_bits;
  const double a = std::min(std::fabs(static_cast<double>(f)), max_finite);
  if (a == 0) return sign;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int emin = 1 - bias;
  int e = std::max(std::ilogb(a), emin);
  double q = std::nearbyint(std::ldexp(a, man_bits - e));
  const double implicit = std::ldexp(1.0, man_bits);
  if (q >= 2 * implicit) {
    q /= 2;
    ++e;
  }
  const uint32_t mant = static_cast<uint32_t>(q);
  if (q < implicit) return sign | mant;  // subnormal
  return sign | (static_cast<uint32_t>(e + bias) << man_bits) |
         (mant - static_cast<uint32_t>(implicit));
}

inline uint16_t FloatToFloat16(float f) {
  return static_cast<uint16_t>(FloatToMinifloat(f, 5, 10, 65504.0, 0x7E00));
}
inline uint8_t FloatToFloat8E4M3(float f) {
  return static_cast<uint8_t>(FloatToMinifloat(f, 4, 3, 448.0, 0x7F));
}
inline uint8_t FloatToFloat8E5M2(float f) {
  return static_cast<uint8_t>(FloatToMinifloat(f, 5, 2, 57344.0, 0x7E));
}

// Little-endian bytes of `values` in `dtype` (kBytes: the float32 bytes).
inline std::vector<std::byte> ConvertFloats(std::span<const float> values, DType dtype) {
  std::vector<std::byte> out(values.size() * (dtype == DType::kBytes ? 4 : ElementSize(dtype)));
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = values[i];
    switch (dtype) {
      case DType::kBFloat16: {
        const uint16_t v = FloatToBFloat16(f);
        std::memcpy(&out[2 * i], &v, 2);
        break;
      }
      case DType::kFloat16: {
        const uint16_t v = FloatToFloat16(f);
        std::memcpy(&out[2 * i], &v, 2);
        break;
      }
      case DType::kFloat8E4M3:
        out[i] = static_cast<std::byte>(FloatToFloat8E4M3(f));
        break;
      case DType::kFloat8E5M2:
        out[i] = static_cast<std::byte>(FloatToFloat8E5M2(f));
        break;
      case DType::kFloat32:
      case DType::kBytes:
        std::memcpy(&out[4 * i], &f, 4);
        break;
    }
  }
  return out;
}

// splitmix64: tiny, deterministic, good enough for test data.
class TestRng {
 public:
  explicit TestRng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

struct SyntheticKvOptions {
  size_t tokens = 1024;
  size_t channels = 1024;  // e.g. 8 KV heads x 128 head dim
  double outlier_fraction = 0.01;
  double outlier_scale = 20;
  double token_correlation = 0.9;
  uint64_t seed = 1;
};

// tokens x channels floats, token-major.
inline std::vector<float> SyntheticKv(const SyntheticKvOptions& o) {
  MC_ASSERT(o.channels > 0, "channels > 0");
  TestRng rng(o.seed);
  std::vector<double> scale(o.channels), mean(o.channels), state(o.channels);
  for (size_t c = 0; c < o.channels; ++c) {
    scale[c] = std::exp(std::log(0.1) + rng.Uniform() * (std::log(10.0) - std::log(0.1)));
    if (rng.Uniform() < o.outlier_fraction) scale[c] *= o.outlier_scale;
    mean[c] = 0.5 * rng.Normal();
    state[c] = rng.Normal();
  }
  const double rho = o.token_correlation;
  const double innovation = std::sqrt(1 - rho * rho);
  std::vector<float> out(o.tokens * o.channels);
  for (size_t t = 0; t < o.tokens; ++t) {
    for (size_t c = 0; c < o.channels; ++c) {
      if (t > 0) state[c] = rho * state[c] + innovation * rng.Normal();
      out[t * o.channels + c] = static_cast<float>(scale[c] * (mean[c] + state[c]));
    }
  }
  return out;
}

// Exactly `bytes` bytes of synthetic KV in `dtype` (kBytes: float32 bytes).
inline std::vector<std::byte> SyntheticKvBytes(size_t bytes, DType dtype, uint64_t seed = 1) {
  const size_t elem = dtype == DType::kBytes ? 4 : ElementSize(dtype);
  SyntheticKvOptions o;
  o.seed = seed;
  o.tokens = (bytes / elem + o.channels) / o.channels;
  std::vector<std::byte> out = ConvertFloats(SyntheticKv(o), dtype);
  out.resize(bytes);
  return out;
}

// The same bytes in a std::string (a store value).
inline std::string SyntheticKvString(size_t bytes, DType dtype, uint64_t seed = 1) {
  const std::vector<std::byte> v = SyntheticKvBytes(bytes, dtype, seed);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_SYNTHETIC_KV_H_

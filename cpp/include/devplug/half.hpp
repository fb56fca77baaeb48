/**
 * @file devplug/half.hpp
 * @brief `devplug::f16` and `devplug::bf16`: the two-byte element types of `DType::F16` and
 *        `DType::BF16`, with the runtime's rounding (to nearest, ties to even, once).
 *
 * Header-only and free of any devplug library: hosts get it through `devplug/devplug.hpp`,
 * plugins through `devplug/plugin.hpp` (a kernel converts with `float(h)`, exact, and
 * `devplug::f16(x)`, rounded as the CPU device rounds, so that its results agree with the
 * CPU's bit for bit where `devplug check` asks it to).
 */
#ifndef DEVPLUG_HALF_HPP
#define DEVPLUG_HALF_HPP

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace devplug {

namespace detail {
/**
 * @brief @p x as a float rounded toward zero, its lowest bit set when that is inexact ("round
 *        to odd"): a float that rounds to f16 or bf16 exactly as @p x itself does, so that a
 *        double is rounded once, never twice (as through `float(x)` to nearest). The runtime's
 *        Cast from f64 does the same.
 */
inline float round_to_odd(double x) noexcept {
  const float t = static_cast<float>(x);
  if (x != x || static_cast<double>(t) == x) return t;  // NaN, or exact
  uint32_t u;
  std::memcpy(&u, &t, sizeof u);
  const double at = static_cast<double>(t) < 0 ? -static_cast<double>(t) : static_cast<double>(t);
  if (at > (x < 0 ? -x : x)) --u;  // rounded away from zero (to infinity, too): one step back
  u |= 1u;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

/**
 * @brief An IEEE 754 half-precision value (binary16): the element type of `DType::F16`.
 *
 * Storage only, as the runtime computes halves in f32: convert with `f16(x)` (rounded to
 * nearest, ties to even, once — from a double too; beyond 65504 it is infinite) and `float(h)`
 * (exact). `bits` is the raw encoding.
 */
struct f16 {
  uint16_t bits = 0;

  f16() = default;
  /** @brief @p x rounded to the nearest f16 (ties to even); NaN stays NaN. */
  explicit f16(float x) noexcept : bits(from_float(x)) {}
  /** @brief @p x rounded to the nearest f16 (ties to even), in one rounding; NaN stays NaN. */
  explicit f16(double x) noexcept : bits(from_float(detail::round_to_odd(x))) {}
  /** @brief The integer @p x rounded to the nearest f16 (ties to even). */
  template <typename I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  explicit f16(I x) noexcept : f16(static_cast<double>(x)) {}
  /** @brief The value whose encoding is @p raw. */
  static f16 from_bits(uint16_t raw) noexcept {
    f16 h;
    h.bits = raw;
    return h;
  }
  /** @brief The exact float value. */
  explicit operator float() const noexcept {
    const uint32_t sign = (uint32_t{bits} & 0x8000u) << 16;
    const uint32_t e = (bits >> 10) & 0x1fu;
    const uint32_t m = bits & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
      u = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
      // Zero or subnormal: m * 2^-24, exact in float.
      const float f = static_cast<float>(m) * 5.9604644775390625e-8f;
      return sign != 0 ? -f : f;
    } else {
      u = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  /** @brief The exact value, as a double. */
  explicit operator double() const noexcept { return static_cast<float>(*this); }
  friend bool operator==(f16 a, f16 b) noexcept { return float(a) == float(b); }
  friend bool operator!=(f16 a, f16 b) noexcept { return !(a == b); }

 private:
  static uint16_t from_float(float x) noexcept {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {  // infinity, or NaN (kept quiet, with its top payload bits)
      return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
    }
    if (a >= 0x477ff000u) {  // 65520 and above round to infinity
      return static_cast<uint16_t>(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) {  // normal: rebias the exponent, round the 13 dropped bits
      const uint32_t v = a - 0x38000000u;
      return static_cast<uint16_t>(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
    }
    if (a < 0x33000000u) {  // below 2^-25: rounds to zero
      return static_cast<uint16_t>(sign);
    }
    // Subnormal: the value in units of 2^-24, rounded to nearest even.
    const uint32_t s = 126 - (a >> 23);  // 14 ... 24
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t k = m >> s;
    const uint32_t rem = m & ((1u << s) - 1);
    const uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (k & 1u) != 0)) {
      ++k;
    }
    return static_cast<uint16_t>(sign | k);
  }
};

/**
 * @brief A bfloat16 value (the upper 16 bits of a float): the element type of `DType::BF16`.
 *
 * Storage only, as `f16`: `bf16(x)` rounds to nearest (ties to even, once — from a double too),
 * `float(b)` is exact.
 */
struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  /** @brief @p x rounded to the nearest bf16 (ties to even), in one rounding; NaN stays NaN. */
  explicit bf16(double x) noexcept : bf16(detail::round_to_odd(x)) {}
  /** @brief The integer @p x rounded to the nearest bf16 (ties to even). */
  template <typename I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  explicit bf16(I x) noexcept : bf16(static_cast<double>(x)) {}
  /** @brief @p x rounded to the nearest bf16 (ties to even); NaN stays NaN. */
  explicit bf16(float x) noexcept {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    } else {
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  /** @brief The value whose encoding is @p raw. */
  static bf16 from_bits(uint16_t raw) noexcept {
    bf16 b;
    b.bits = raw;
    return b;
  }
  /** @brief The exact float value. */
  explicit operator float() const noexcept {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  /** @brief The exact value, as a double. */
  explicit operator double() const noexcept { return static_cast<float>(*this); }
  friend bool operator==(bf16 a, bf16 b) noexcept { return float(a) == float(b); }
  friend bool operator!=(bf16 a, bf16 b) noexcept { return !(a == b); }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "f16 and bf16 are two bytes");

}  // namespace devplug

#endif  // DEVPLUG_HALF_HPP

// A plugin's kernels convert halves with devplug::f16 / devplug::bf16 from devplug/plugin.hpp
// alone (devplug/half.hpp, which the host wrapper shares): rounding to nearest, ties to even,
// as the CPU device rounds, so that a kernel's f16 results can agree with the CPU's bit for bit
// (a vendor trial hand-wrote conversions that truncated and lost signs).

#include <devplug/plugin.hpp>

#include <cstdio>

namespace {
int g_failed = 0, g_passed = 0;
void check(bool ok, const char* what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL %s\n", what);
  }
}
#define CHECK(c) check(static_cast<bool>(c), #c)
}  // namespace

int main() {
  using devplug::bf16;
  using devplug::f16;
  CHECK(f16(1.5f).bits == 0x3e00);
  CHECK(f16(-2.0f).bits == 0xc000);
  // 1 + 2^-11 is halfway between 1 and the next f16: ties to even gives 1.
  CHECK(f16(1.00048828125f).bits == 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
  CHECK(f16(1.00146484375f).bits == 0x3c02);
  // Just above halfway rounds up (truncation would not).
  CHECK(f16(1.0005f).bits == 0x3c01);
  CHECK(float(f16::from_bits(0xbc01)) == -1.0009765625f);
  CHECK(f16(70000.0f).bits == 0x7c00);
  CHECK(bf16(1.5f).bits == 0x3fc0);
  CHECK(bf16(-1.00390625f).bits == 0xbf80);  // halfway: ties to even (down)
  CHECK(float(bf16::from_bits(0xbf81)) == -1.0078125f);
  std::printf("plugin_half_test: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

// expect: devplug: this C\+\+ type is not a tensor element type\. Element types: float
// A tensor of a C++ type without a DType (here `unsigned long`: devplug has no u64) stops the
// compile with one static_assert that names the element types there are, not with an
// "incomplete type dtype_traits<...>" error from inside the header. Built by
// tests/cpp/CMakeLists.txt twice: as is, it must fail with the message above; with
// DEVPLUG_COMPILE_FAIL_CONTROL (the same code with a supported type), it must compile.
#include <devplug/devplug.hpp>

#include <vector>

#ifdef DEVPLUG_COMPILE_FAIL_CONTROL
using Element = long long;  // a 64-bit integer that is not int64_t on Linux: I64
#else
using Element = unsigned long;
#endif

std::vector<Element> read(const devplug::Tensor& t) { return t.to_vector<Element>(); }

int main() {}

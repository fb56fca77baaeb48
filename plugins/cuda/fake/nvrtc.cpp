// A fake NVRTC (libnvrtc.so) for testing the CUDA plugin without a GPU: it accepts any program
// and returns a token image that the fake driver (driver.cpp) takes for a CUBIN or PTX (whose
// kernels it has built in). Its version, 99.0, keeps its images out of real NVRTC's cache keys.
// The real NVRTC compiles the kernels in the plugin's unit tests (CI installs it).
#include <cstring>
#include <string>

namespace {
enum : int { NVRTC_SUCCESS = 0, NVRTC_ERROR_INVALID_INPUT = 3, NVRTC_ERROR_INVALID_PROGRAM = 5 };
struct Program {
  std::string source;
  bool for_arch = false;  // compiled for an sm_XX target: a CUBIN
  bool compiled = false;
};
const char kCubin[] = "\x7f" "ELF devplug fake cubin";
const char kPtx[] = "// devplug fake PTX\n.version 0.0\n";
}  // namespace

extern "C" {

int nvrtcVersion(int* major, int* minor) {
  if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
  *major = 99;
  *minor = 0;
  return NVRTC_SUCCESS;
}

int nvrtcCreateProgram(void** prog, const char* src, const char*, int, const char* const*, const char* const*) {
  if (!prog || !src) return NVRTC_ERROR_INVALID_INPUT;
  *prog = new Program{src};
  return NVRTC_SUCCESS;
}

int nvrtcDestroyProgram(void** prog) {
  if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
  delete static_cast<Program*>(*prog);
  *prog = nullptr;
  return NVRTC_SUCCESS;
}

int nvrtcCompileProgram(void* prog, int n, const char* const* options) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  Program* p = static_cast<Program*>(prog);
  for (int i = 0; i < n; ++i)
    if (std::strncmp(options[i], "--gpu-architecture=sm_", 22) == 0) p->for_arch = true;
  p->compiled = true;
  return NVRTC_SUCCESS;
}

int nvrtcGetProgramLogSize(void* prog, size_t* size) {
  if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
  *size = 1;
  return NVRTC_SUCCESS;
}

int nvrtcGetProgramLog(void* prog, char* log) {
  if (!prog || !log) return NVRTC_ERROR_INVALID_INPUT;
  log[0] = 0;
  return NVRTC_SUCCESS;
}

int nvrtcGetCUBINSize(void* prog, size_t* size) {
  Program* p = static_cast<Program*>(prog);
  if (!p || !size || !p->compiled || !p->for_arch) return NVRTC_ERROR_INVALID_INPUT;
  *size = sizeof kCubin;
  return NVRTC_SUCCESS;
}

int nvrtcGetCUBIN(void* prog, char* out) {
  Program* p = static_cast<Program*>(prog);
  if (!p || !out || !p->compiled || !p->for_arch) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(out, kCubin, sizeof kCubin);
  return NVRTC_SUCCESS;
}

int nvrtcGetPTXSize(void* prog, size_t* size) {
  Program* p = static_cast<Program*>(prog);
  if (!p || !size || !p->compiled) return NVRTC_ERROR_INVALID_INPUT;
  *size = sizeof kPtx;
  return NVRTC_SUCCESS;
}

int nvrtcGetPTX(void* prog, char* out) {
  Program* p = static_cast<Program*>(prog);
  if (!p || !out || !p->compiled) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(out, kPtx, sizeof kPtx);
  return NVRTC_SUCCESS;
}

}  // extern "C"

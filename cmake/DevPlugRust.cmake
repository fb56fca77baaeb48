# Build-tree only: finds cargo and rustc, and asks rustc which native libraries a Rust static
# library needs (`rustc --print native-static-libs`), so that DevPlug::devplug_static, the
# installed config and devplug.pc carry rustc's own answer, never a hand-written list.
include_guard(GLOBAL)

# cargo: the CARGO variable or environment variable (set when a cargo build script runs us),
# else the one on PATH / in ~/.cargo/bin.
if(NOT DEVPLUG_CARGO)
  if(DEFINED CARGO AND NOT CARGO STREQUAL "")
    set(_devplug_cargo "${CARGO}")
  elseif(DEFINED ENV{CARGO} AND NOT "$ENV{CARGO}" STREQUAL "")
    set(_devplug_cargo "$ENV{CARGO}")
  else()
    find_program(_devplug_cargo_found cargo HINTS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin")
    if(NOT _devplug_cargo_found)
      message(FATAL_ERROR "devplug: cargo not found. Install Rust (https://rustup.rs) or pass "
                          "-DDEVPLUG_CARGO=/path/to/cargo.")
    endif()
    set(_devplug_cargo "${_devplug_cargo_found}")
  endif()
  set(DEVPLUG_CARGO "${_devplug_cargo}" CACHE FILEPATH "cargo used to build the Rust C API")
endif()

# rustc: the one next to cargo (the same toolchain), else RUSTC, else PATH.
if(NOT DEVPLUG_RUSTC)
  get_filename_component(_devplug_cargo_dir "${DEVPLUG_CARGO}" DIRECTORY)
  if(EXISTS "${_devplug_cargo_dir}/rustc${CMAKE_EXECUTABLE_SUFFIX}")
    set(_devplug_rustc "${_devplug_cargo_dir}/rustc${CMAKE_EXECUTABLE_SUFFIX}")
  elseif(DEFINED ENV{RUSTC} AND NOT "$ENV{RUSTC}" STREQUAL "")
    set(_devplug_rustc "$ENV{RUSTC}")
  else()
    find_program(_devplug_rustc_found rustc HINTS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin")
    if(NOT _devplug_rustc_found)
      message(FATAL_ERROR "devplug: rustc not found next to ${DEVPLUG_CARGO} nor on PATH; "
                          "pass -DDEVPLUG_RUSTC=/path/to/rustc.")
    endif()
    set(_devplug_rustc "${_devplug_rustc_found}")
  endif()
  set(DEVPLUG_RUSTC "${_devplug_rustc}" CACHE FILEPATH "rustc of cargo's toolchain")
endif()

# _devplug_probe_native_static_libs(<out-var>)
# Compiles an empty staticlib with DEVPLUG_RUSTC and returns the `native-static-libs:` note.
function(_devplug_probe_native_static_libs out)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/devplug-native-libs-probe")
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${dir}/probe.rs" "// empty: only the native libraries of std are wanted\n")
  execute_process(
    COMMAND "${DEVPLUG_RUSTC}" --crate-type staticlib --crate-name devplug_probe
            --edition 2021 --print native-static-libs
            -o "${dir}/libdevplug_probe.a" "${dir}/probe.rs"
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE stdout
    ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "devplug: `${DEVPLUG_RUSTC} --print native-static-libs` failed (${rc}):\n"
                        "${stdout}${stderr}")
  endif()
  if(NOT "${stdout}${stderr}" MATCHES "native-static-libs: ([^\r\n]*)")
    message(FATAL_ERROR "devplug: no `native-static-libs:` note in rustc's output:\n"
                        "${stdout}${stderr}")
  endif()
  string(STRIP "${CMAKE_MATCH_1}" libs)
  set(${out} "${libs}" PARENT_SCOPE)
endfunction()

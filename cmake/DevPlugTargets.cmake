# Defines devplug's four targets from the locations of its files.
#
# Shared by the build tree (top-level CMakeLists.txt, where the files are produced by cargo) and
# by the installed DevPlugConfig.cmake (where they sit under the install prefix), so that both
# give the same targets with the same usage requirements:
#
#   DevPlug::devplug         libdevplug.so (the C API)
#   DevPlug::devplug_static  libdevplug.a + the native libraries Rust's std needs
#   DevPlug::cxx             header-only C++17 wrapper; links DevPlug::devplug
#   DevPlug::plugin_sdk      headers for plugin authors; links nothing
include_guard(GLOBAL)

# _devplug_define_targets(
#     SHARED_LOCATION <file>   real file of the shared library (libdevplug.so.X.Y.Z)
#     SONAME <soname>          its soname (libdevplug.so.X)
#     STATIC_LOCATION <file>   libdevplug.a
#     INCLUDE_DIRS <dir>...    where devplug/*.h and devplug/*.hpp are found
#     NATIVE_LIBS <item>...    link items for the static library (-lm, Threads::Threads, ...)
#     [GLOBAL]      the targets are visible in the whole build tree
#     [NO_SYSTEM])  the include dirs are not system dirs (-I, not -isystem), so warnings in the
#                   headers show (for devplug's own build; consumers get -isystem)
function(_devplug_define_targets)
  # ${ARGN}, not PARSE_ARGV: a quoted ;-list argument is split into its items.
  cmake_parse_arguments(arg "GLOBAL;NO_SYSTEM" "SHARED_LOCATION;SONAME;STATIC_LOCATION"
                        "INCLUDE_DIRS;NATIVE_LIBS" ${ARGN})
  set(scope)
  if(arg_GLOBAL)
    set(scope GLOBAL)
  endif()

  add_library(DevPlug::devplug SHARED IMPORTED ${scope})
  set_target_properties(DevPlug::devplug PROPERTIES
    IMPORTED_LOCATION "${arg_SHARED_LOCATION}"
    IMPORTED_SONAME "${arg_SONAME}"
    INTERFACE_INCLUDE_DIRECTORIES "${arg_INCLUDE_DIRS}")

  add_library(DevPlug::devplug_static STATIC IMPORTED ${scope})
  set_target_properties(DevPlug::devplug_static PROPERTIES
    IMPORTED_LOCATION "${arg_STATIC_LOCATION}"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "${arg_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${arg_NATIVE_LIBS}")

  add_library(DevPlug::cxx INTERFACE IMPORTED ${scope})
  set_target_properties(DevPlug::cxx PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${arg_INCLUDE_DIRS}"
    INTERFACE_COMPILE_FEATURES cxx_std_17
    INTERFACE_LINK_LIBRARIES DevPlug::devplug)

  add_library(DevPlug::plugin_sdk INTERFACE IMPORTED ${scope})
  set_target_properties(DevPlug::plugin_sdk PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${arg_INCLUDE_DIRS}")

  if(arg_NO_SYSTEM)
    foreach(t IN ITEMS devplug devplug_static cxx plugin_sdk)
      if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.25)
        set_property(TARGET DevPlug::${t} PROPERTY SYSTEM OFF)
      else()
        set_property(TARGET DevPlug::${t} PROPERTY IMPORTED_NO_SYSTEM ON) # CMake 3.23, 3.24
      endif()
    endforeach()
  endif()
endfunction()

# _devplug_native_libs_to_cmake(<out-var> <rustc-native-static-libs-string>)
# Turns rustc's "-lgcc_s -lutil -lpthread ..." into CMake link items, in the same order,
# with -lpthread / -pthread replaced by Threads::Threads.
function(_devplug_native_libs_to_cmake out native)
  separate_arguments(items UNIX_COMMAND "${native}")
  set(result)
  foreach(item IN LISTS items)
    if(item STREQUAL "-lpthread" OR item STREQUAL "-pthread")
      set(item Threads::Threads)
    endif()
    list(APPEND result "${item}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

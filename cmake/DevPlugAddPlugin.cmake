# devplug_add_plugin(<name> SOURCES <src>... [LINK_LIBRARIES <lib>...] [OUTPUT_DIRECTORY <dir>]
#                    [EXPORTS <symbol>...])
#
# Builds a devplug device plugin: a MODULE library lib<name>.so that the runtime loads with
# dlopen. It links DevPlug::plugin_sdk (headers only) and never libdevplug: everything a plugin
# needs from the host arrives through the host table. Only the plugin's entry symbol should be
# exported, so C and C++ symbols are hidden by default (mark the entry point with the export
# macro of devplug/plugin.h). Undefined symbols are a link error where the linker supports
# --no-undefined, so a plugin that accidentally calls into libdevplug fails at build time, not
# at load time.
#
# Where the linker supports it, a version script exports devplug_plugin_entry (plus any
# EXPORTS) and makes every other symbol local: -fvisibility=hidden is not enough for C++, where
# libstdc++'s templates keep default visibility and would leak hundreds of symbols (some
# STB_GNU_UNIQUE, which also keeps dlclose from unloading the library).
#
# OUTPUT_DIRECTORY defaults to DEVPLUG_PLUGIN_OUTPUT_DIR when that variable is set (devplug's
# own build sets it to <build>/plugins, where its tests look), else to the current binary dir.
include_guard(GLOBAL)
include(CheckLinkerFlag)

function(devplug_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT_DIRECTORY" "SOURCES;LINK_LIBRARIES;EXPORTS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "devplug_add_plugin(${name}): unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "devplug_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT TARGET DevPlug::plugin_sdk)
    message(FATAL_ERROR "devplug_add_plugin(${name}): DevPlug::plugin_sdk is missing; "
                        "call find_package(DevPlug CONFIG REQUIRED) first")
  endif()

  add_library(${name} MODULE ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE DevPlug::plugin_sdk ${arg_LINK_LIBRARIES})
  set_target_properties(${name} PROPERTIES
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    # devplug/plugin.hpp is C++17; the property only affects C++ sources.
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON)

  set(out_dir "${arg_OUTPUT_DIRECTORY}")
  if(out_dir STREQUAL "" AND DEFINED DEVPLUG_PLUGIN_OUTPUT_DIR)
    set(out_dir "${DEVPLUG_PLUGIN_OUTPUT_DIR}")
  endif()
  if(NOT out_dir STREQUAL "")
    # LIBRARY_OUTPUT_DIRECTORY is where MODULE libraries go; the genex keeps multi-config
    # generators from appending a per-config subfolder.
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "$<1:${out_dir}>")
  endif()

  if(NOT APPLE AND NOT WIN32)
    get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
    if("C" IN_LIST languages)
      set(lang C)
    else()
      set(lang CXX)
    endif()
    check_linker_flag(${lang} "LINKER:--no-undefined" DEVPLUG_LINKER_HAS_NO_UNDEFINED)
    if(DEVPLUG_LINKER_HAS_NO_UNDEFINED)
      target_link_options(${name} PRIVATE "LINKER:--no-undefined")
    endif()
    set(exports devplug_plugin_entry ${arg_EXPORTS})
    list(JOIN exports "; " exports)
    set(map "${CMAKE_CURRENT_BINARY_DIR}/${name}.exports.map")
    file(CONFIGURE OUTPUT "${map}" CONTENT "{\n  global: ${exports};\n  local: *;\n};\n")
    check_linker_flag(${lang} "LINKER:--version-script=${map}" DEVPLUG_LINKER_HAS_VERSION_SCRIPT)
    if(DEVPLUG_LINKER_HAS_VERSION_SCRIPT)
      target_link_options(${name} PRIVATE "LINKER:--version-script=${map}")
      set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${map}")
    endif()
  endif()
endfunction()

// Compile-time questions about devplug::Attrs for the C++ tests: which values `Attrs::set`
// takes, on an lvalue (`can_set<T>`) and on a temporary (`can_set_temporary<T>`).
#ifndef DEVPLUG_TESTS_ATTRS_TRAITS_HPP
#define DEVPLUG_TESTS_ATTRS_TRAITS_HPP

#include <devplug/devplug.hpp>

#include <type_traits>
#include <utility>

namespace {

template <class T, class = void>
struct can_set : std::false_type {};
template <class T>
struct can_set<T, std::void_t<decltype(std::declval<devplug::Attrs&>().set("a", std::declval<T>()))>>
    : std::true_type {};

template <class T, class = void>
struct can_set_temporary : std::false_type {};
template <class T>
struct can_set_temporary<T, std::void_t<decltype(std::declval<devplug::Attrs>().set("a", std::declval<T>()))>>
    : std::true_type {};

}  // namespace

#endif

// The bare identifier of a function or kernel as a demangler or the device prints it: what the device's assert
// line names, what a report's kernel name is filtered on. One rule for shim/fault/attribution.cc and report/hints.cc.
//
//   function_identifier("nll_loss_forward_reduce_cuda_kernel_2d")                       -> same
//   function_identifier("void at::native::(anonymous namespace)::k<float, 4>(float*, long)") -> "k"
//   function_identifier("void foo(T*) [with T = float]")                                -> "foo"
//   function_identifier("")  -> ""   (nothing identifier-like at the end: "")
#pragma once

#include <cctype>
#include <string_view>

namespace cdsa::base {

inline bool identifier_char(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

inline std::string_view function_identifier(std::string_view f) {
  // The argument list: the first '(' outside template arguments that does not open "(anonymous namespace)".
  constexpr std::string_view kAnon = "(anonymous namespace)";
  int depth = 0;
  size_t end = f.size();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '<')
      ++depth;
    else if (f[i] == '>' && depth > 0)
      --depth;
    else if (f[i] == '(' && depth == 0) {
      if (f.substr(i, kAnon.size()) == kAnon) {
        i += kAnon.size() - 1;
        continue;
      }
      end = i;
      break;
    }
  }
  f = f.substr(0, end);
  while (!f.empty() && f.back() == ' ') f.remove_suffix(1);
  // Trailing template arguments: "foo<float, 4>" -> "foo".
  if (!f.empty() && f.back() == '>') {
    depth = 0;
    for (size_t i = f.size(); i-- > 0;) {
      if (f[i] == '>')
        ++depth;
      else if (f[i] == '<' && --depth == 0) {
        f = f.substr(0, i);
        break;
      }
    }
  }
  size_t start = f.size();
  while (start > 0 && identifier_char(f[start - 1])) --start;
  return f.substr(start);
}

}  // namespace cdsa::base

// The bare identifier of a function or kernel as a demangler or the device prints it: what the device's assert
// line names, what a report's kernel name is filtered on. One rule for shim/fault/attribution.cc and report/hints.cc.
//
//   function_identifier("nll_loss_forward_reduce_cuda_kernel_2d")                       -> same
//   function_identifier("void at::native::(anonymous namespace)::k<float, 4>(float*, long)") -> "k"
//   function_identifier("void foo(T*) [with T = float]")                                -> "foo"
//   function_identifier("")  -> ""   (nothing identifier-like at the end: "")
//
// The qualified name, as scopes (template arguments dropped, an anonymous namespace as ""), and whether a printed
// function can be a __global__ one at all (for the assert text, shim/fault/attribution.cc):
//   qualified_name("void at::native::(anonymous namespace)::k<float, 4>(float*, long)") -> {"at", "native", "", "k"}
//   may_be_kernel("operator()") -> false    may_be_kernel("void Op<float>::apply(int)") -> false
//   may_be_kernel("b::foo") -> true         may_be_kernel("int helper(int)") -> false
//
// Contract: pure functions over text; qualified_name allocates, the others do not.
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "base/demangle.h"

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

namespace identifier_internal {
constexpr std::string_view kAnonymous[] = {"(anonymous namespace)", "{anonymous}", "<unnamed>"};

// The position of the '<' that opens the template arguments closed by the '>' at `close`, or npos.
inline size_t template_open(std::string_view f, size_t close) {
  int depth = 0;
  for (size_t j = close + 1; j-- > 0;) {
    if (f[j] == '>')
      ++depth;
    else if (f[j] == '<' && --depth == 0)
      return j;
  }
  return std::string_view::npos;
}

// Where the argument list of `f` opens (the first '(' outside template arguments that opens no anonymous
// namespace), or f.size().
inline size_t argument_list(std::string_view f) {
  int depth = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f.substr(i, kAnonymous[0].size()) == kAnonymous[0] || f.substr(i, kAnonymous[2].size()) == kAnonymous[2]) {
      i += (f[i] == '(' ? kAnonymous[0] : kAnonymous[2]).size() - 1;
    } else if (f[i] == '<') {
      ++depth;
    } else if (f[i] == '>' && depth > 0) {
      --depth;
    } else if (f[i] == '(' && depth == 0) {
      return i;
    }
  }
  return f.size();
}

// The scopes of the qualified name that ends `f` (which holds no argument list), as printed (template arguments
// kept), outermost first; `*start` gets where the name begins (what is before it is the return type).
inline std::vector<std::string_view> raw_scopes(std::string_view f, size_t* start) {
  std::vector<std::string_view> out;
  size_t i = f.size();
  while (i > 0 && f[i - 1] == ' ') --i;
  for (;;) {
    size_t j = i;
    for (std::string_view a : kAnonymous)
      if (j == i && i >= a.size() && f.substr(i - a.size(), a.size()) == a) j = i - a.size();
    if (j == i && i > 0 && f[i - 1] == '>') {
      size_t open = template_open(f, i - 1);
      if (open == std::string_view::npos) break;
      j = open;
    }
    while (j > 0 && (identifier_char(f[j - 1]) || f[j - 1] == '~')) --j;
    if (j == i) break;
    out.insert(out.begin(), f.substr(j, i - j));
    i = j;
    if (i >= 2 && f[i - 1] == ':' && f[i - 2] == ':') {
      i -= 2;
      continue;
    }
    break;
  }
  if (start) *start = i;
  return out;
}

// Whether `word` stands whole (not part of a longer identifier) somewhere in `f`.
inline bool has_word(std::string_view f, std::string_view word) {
  for (size_t at = f.find(word); at != std::string_view::npos; at = f.find(word, at + 1)) {
    bool left = at == 0 || !identifier_char(f[at - 1]);
    bool right = at + word.size() >= f.size() || !identifier_char(f[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

inline bool anonymous(std::string_view scope) {
  for (std::string_view a : kAnonymous)
    if (scope == a) return true;
  return false;
}
}  // namespace identifier_internal

// The scopes of the function's qualified name, outermost first, its identifier last; template arguments are
// dropped and an anonymous namespace (every way compilers print one) is "". Empty when nothing identifier-like.
inline std::vector<std::string> qualified_name(std::string_view f) {
  using namespace identifier_internal;
  std::vector<std::string> out;
  for (std::string_view scope : raw_scopes(f.substr(0, argument_list(f)), nullptr)) {
    if (anonymous(scope)) {
      out.emplace_back();
      continue;
    }
    size_t lt = scope.find('<');
    out.emplace_back(scope.substr(0, lt));
  }
  if (out.empty() || out.back().empty() || !identifier_char(out.back().back())) return {};
  return out;
}

// Whether `f`, a function as the device's assert line prints it (the function that holds the assert), can be a
// __global__ function at all. The CUDA C++ Programming Guide (5.4.1.1, constraints for __global__ functions): it
// "must return void" and "cannot be a member of a class, struct, or union". So not an operator (operator() of a
// device lambda or functor: PyTorch's index kernels assert there), not a lambda, not in a scope with template
// arguments (a class template: a namespace has none), not a constructor or destructor, no cv or ref qualifier after
// its argument list (a member function's), and no return type but void where the line prints one. A name that
// passes may still be a __device__ function the kernel calls; one that fails is certainly not the kernel.
inline bool may_be_kernel(std::string_view f) {
  using namespace identifier_internal;
  const size_t args = argument_list(f);
  std::string_view name = f.substr(0, args);
  if (has_word(name, "operator") || has_word(f, "lambda")) return false;
  size_t start = 0;
  const std::vector<std::string_view> scopes = raw_scopes(name, &start);
  if (scopes.empty() || function_identifier(f).empty()) return false;
  for (size_t i = 0; i + 1 < scopes.size(); ++i)
    if (!anonymous(scopes[i]) && scopes[i].find('<') != std::string_view::npos) return false;
  const std::vector<std::string> q = qualified_name(f);
  if (q.empty() || q.back().front() == '~' || (q.size() >= 2 && q[q.size() - 2] == q.back())) return false;
  if (args < f.size()) {  // after the argument list: " const", " volatile", " &", " &&" (a member function's)
    int paren = 0;
    for (size_t i = args; i < f.size(); ++i) {
      if (f[i] == '(') {
        ++paren;
      } else if (f[i] == ')' && --paren == 0) {
        std::string_view after = f.substr(i + 1);
        after = after.substr(0, after.find('['));  // " [with T = float]"
        if (has_word(after, "const") || has_word(after, "volatile") || after.find('&') != std::string_view::npos)
          return false;
        break;
      }
    }
  }
  std::string_view ret = name.substr(0, start);  // the return type, where the line prints one
  while (!ret.empty() && ret.back() == ' ') ret.remove_suffix(1);
  if (!ret.empty()) {
    size_t word = ret.size();
    while (word > 0 && ret[word - 1] != ' ') --word;
    if (ret.substr(word) != "void") return false;
  }
  return true;
}

// Whether the kernel named `kernel` (mangled "_Z...", or plain) is the function an assert line names: the same whole
// identifier (above), compared demangled, never a part of a longer one ("kernel" does not name
// "_Z13kernel_helperPi"); where the assert qualifies it, its scopes must be the kernel's, in order ("b::foo" does
// not name a::foo; "foo" names a::foo; an anonymous namespace matches any, however it is printed). Lenient on
// purpose: a wrong "no" could leave an innocent launch alone, a wrong "yes" only keeps a candidate.
inline bool kernel_matches_assert_function(std::string_view kernel, std::string_view function) {
  const std::string_view id = function_identifier(function);
  if (id.empty()) return false;
  // A mangled name is compared demangled: "_ZN2at6native12_GLOBAL__N_112index_kernelIfLi4EEEvPT_l" names
  // index_kernel, "_Z13kernel_helperPi" does not name "kernel".
  const std::string name = demangle(std::string(kernel).c_str());
  if (function_identifier(name) != id) return false;
  // The assert's scopes, where it prints any, in order among the kernel's (anonymous namespaces skipped on both
  // sides: "(anonymous namespace)", "{anonymous}" and "<unnamed>" are one thing printed three ways).
  const std::vector<std::string> want = qualified_name(function), have = qualified_name(name);
  size_t at = 0;
  for (size_t i = 0; i + 1 < want.size(); ++i) {
    if (want[i].empty()) continue;
    while (at + 1 < have.size() && have[at] != want[i]) ++at;
    if (at + 1 >= have.size()) return false;
    ++at;
  }
  return true;
}

}  // namespace cdsa::base

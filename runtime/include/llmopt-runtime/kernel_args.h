//===- kernel_args.h - a kernel call's typed parameters ------------*- C++ -*-===//
//
// The scalar parameters of a kernel instruction, decoded once when the plan is
// loaded (from the `params` object, against the kernel ABI's table in
// llmopt-kernels/abi.h): every backend reads typed fields, never strings.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_KERNEL_ARGS_H
#define LLMOPT_RUNTIME_KERNEL_ARGS_H

#include "llmopt-kernels/abi.h"
#include "llmopt-kernels/cpu.h"
#include "llmopt-runtime/json.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llmopt::runtime {

namespace detail {
template <int Kind> struct ArgOf;
enum ArgKind { Number, Integer, Flag, Text, Axis, Axes };
template <> struct ArgOf<Number> { using type = double; };
template <> struct ArgOf<Integer> { using type = int64_t; };
template <> struct ArgOf<Flag> { using type = bool; };
template <> struct ArgOf<Text> { using type = std::string; };
template <> struct ArgOf<Axis> { using type = std::string; };
template <> struct ArgOf<Axes> { using type = std::string; };
} // namespace detail

/// One field per LLMOPT_KERNEL_PARAMS entry, holding the plan's value or the
/// kernel's default for it.
struct KernelArgs {
#define LLMOPT_KERNEL_ARG_FIELD(name, kind) detail::ArgOf<detail::kind>::type name{};
  LLMOPT_KERNEL_PARAMS(LLMOPT_KERNEL_ARG_FIELD)
#undef LLMOPT_KERNEL_ARG_FIELD

  /// The mesh axes named by `amax_axis`, in order.
  std::vector<std::string> amaxAxes() const;
  /// A rotary call's frequency scaling (Llama 3's and linear).
  kernels::cpu::RopeScaling ropeScaling() const;
};

/// Decodes `params` (may be null: every parameter takes its default) for a call
/// of `kernel`. On failure returns false with `where` set to the offending key
/// (".params.<name>" or ".params") and `why` to what is wrong.
bool decodeKernelArgs(const kernels::KernelInfo &kernel, const json::Value *params,
                      KernelArgs &args, std::string &where, std::string &why);

/// The mesh-axis parameters of a decoded call (shard, cp, each of amax_axis),
/// with their keys, for the loader to check against the plan's mesh.
std::vector<std::pair<std::string, std::string>> axisArgs(const KernelArgs &args);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_KERNEL_ARGS_H

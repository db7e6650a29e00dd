//===- kernel_args.cpp - decoding a kernel call's parameters --------------===//

#include "llmopt-runtime/kernel_args.h"

#include <cmath>
#include <cstdlib>

namespace llmopt::runtime {
namespace {

using detail::ArgKind;

struct ParamInfo {
  const char *name;
  ArgKind kind;
};

constexpr ParamInfo kParams[] = {
#define LLMOPT_KERNEL_PARAM_INFO(name, kind) {#name, detail::kind},
    LLMOPT_KERNEL_PARAMS(LLMOPT_KERNEL_PARAM_INFO)
#undef LLMOPT_KERNEL_PARAM_INFO
};

const ParamInfo *findParam(const std::string &name) {
  for (const ParamInfo &p : kParams)
    if (name == p.name)
      return &p;
  return nullptr;
}

const char *kindName(ArgKind k) {
  switch (k) {
  case ArgKind::Number:
    return "a finite number";
  case ArgKind::Integer:
    return "an integer";
  case ArgKind::Flag:
    return "true or false";
  case ArgKind::Text:
    return "a string";
  case ArgKind::Axis:
    return "a mesh axis name";
  case ArgKind::Axes:
    return "mesh axis names, comma-separated";
  }
  return "?";
}

void assign(double &to, const json::Value &v) { to = v.number; }
void assign(int64_t &to, const json::Value &v) { to = v.integer; }
void assign(bool &to, const json::Value &v) { to = v.boolean; }
void assign(std::string &to, const json::Value &v) { to = v.string; }

/// Stores `v` (already of the right kind) into the field `name`.
void store(KernelArgs &args, const std::string &name, const json::Value &v) {
#define LLMOPT_KERNEL_ARG_STORE(field, kind)                                                       \
  if (name == #field)                                                                              \
    return assign(args.field, v);
  LLMOPT_KERNEL_PARAMS(LLMOPT_KERNEL_ARG_STORE)
#undef LLMOPT_KERNEL_ARG_STORE
}

/// `text` as a JSON value of kind `k` (a default written in abi.h).
json::Value fromDefault(ArgKind k, const std::string &text) {
  json::Value v;
  switch (k) {
  case ArgKind::Number:
  case ArgKind::Integer:
    v.kind = json::Value::Kind::Number;
    v.number = std::strtod(text.c_str(), nullptr);
    v.integer = int64_t(v.number);
    v.isInteger = true;
    break;
  case ArgKind::Flag:
    v.kind = json::Value::Kind::Bool;
    v.boolean = text == "true";
    break;
  default:
    v.kind = json::Value::Kind::String;
    v.string = text;
  }
  return v;
}

bool ofKind(const json::Value &v, ArgKind k) {
  switch (k) {
  case ArgKind::Number:
    return v.isNumber() && std::isfinite(v.number);
  case ArgKind::Integer:
    return v.isNumber() && v.isInteger;
  case ArgKind::Flag:
    return v.isBool();
  default:
    return v.isString();
  }
}

struct Declared {
  std::string name;
  bool hasDefault = false;
  std::string dflt;
};

/// The kernel's parameter list from abi.h, with the defaults it writes.
std::vector<Declared> declared(const kernels::KernelInfo &k) {
  std::vector<Declared> out;
  std::string list = k.params;
  for (size_t start = 0; start < list.size();) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
    start = comma == std::string::npos ? list.size() : comma + 1;
    Declared d;
    size_t eq = item.find('=');
    d.name = item.substr(0, eq);
    if (eq != std::string::npos) {
      d.hasDefault = true;
      d.dflt = item.substr(eq + 1);
    }
    out.push_back(std::move(d));
  }
  return out;
}

} // namespace

std::vector<std::string> KernelArgs::amaxAxes() const {
  std::vector<std::string> out;
  for (size_t start = 0; start < amax_axis.size();) {
    size_t comma = amax_axis.find(',', start);
    out.push_back(amax_axis.substr(start, comma == std::string::npos ? comma : comma - start));
    start = comma == std::string::npos ? amax_axis.size() : comma + 1;
  }
  return out;
}

kernels::cpu::RopeScaling KernelArgs::ropeScaling() const {
  kernels::cpu::RopeScaling sc;
  sc.factor = float(factor);
  sc.lowFreqFactor = float(low_freq_factor);
  sc.highFreqFactor = float(high_freq_factor);
  sc.originalMaxPositions = float(original_max_positions);
  sc.linearFactor = float(linear_factor);
  return sc;
}

bool decodeKernelArgs(const kernels::KernelInfo &kernel, const json::Value *params,
                      KernelArgs &args, std::string &where, std::string &why) {
  args = KernelArgs();
  std::vector<Declared> list = declared(kernel);
  std::string takes;
  for (const Declared &d : list) {
    takes += (takes.empty() ? "" : ", ") + d.name;
    const ParamInfo *info = findParam(d.name);
    if (info && d.hasDefault)
      store(args, d.name, fromDefault(info->kind, d.dflt));
  }
  if (!params)
    return true;
  if (!params->isObject()) {
    where = ".params";
    why = "must be an object";
    return false;
  }
  for (const auto &[name, value] : params->object) {
    where = ".params." + name;
    bool taken = false;
    for (const Declared &d : list)
      taken |= d.name == name;
    const ParamInfo *info = findParam(name);
    if (!taken || !info) {
      why = std::string("'") + kernel.name + "' takes no parameter '" + name + "'" +
            (takes.empty() ? " (it takes none)" : " (it takes " + takes + ")");
      return false;
    }
    if (!ofKind(value, info->kind)) {
      why = std::string("must be ") + kindName(info->kind);
      return false;
    }
    store(args, name, value);
  }
  if (!args.fp8.empty() && args.fp8 != "e4m3" && args.fp8 != "hybrid") {
    where = ".params.fp8";
    why = "must be e4m3 or hybrid, got '" + args.fp8 + "'";
    return false;
  }
  if (!args.epilogue.empty() && args.epilogue != "gelu_tanh") {
    where = ".params.epilogue";
    why = "must be gelu_tanh, got '" + args.epilogue + "'";
    return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> axisArgs(const KernelArgs &args) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!args.shard.empty())
    out.emplace_back("shard", args.shard);
  if (!args.cp.empty())
    out.emplace_back("cp", args.cp);
  for (const std::string &a : args.amaxAxes())
    out.emplace_back("amax_axis", a);
  return out;
}

} // namespace llmopt::runtime

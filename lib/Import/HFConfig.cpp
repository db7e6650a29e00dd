//===- HFConfig.cpp - Hugging Face config.json importer -------------------===//
//
// Field names and defaults follow the transformers configuration classes of
// each architecture (GPT2Config, LlamaConfig, MistralConfig, MixtralConfig,
// Qwen2Config). Every size is checked: present when required, an integer,
// positive, consistent with the others (heads divide the width, kv heads
// divide heads, top-k within the experts), and small enough that the products
// the model needs fit in 64 bits. Floats are finite, `rope_scaling` is
// validated, and nesting is bounded before the parser sees the text. Messages
// name the fields as the file's family spells them.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Import/HFConfig.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Support/JSONDepth.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include <cmath>

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
namespace json = llvm::json;

bool llmopt::isHFConfigFile(StringRef filename) { return filename.ends_with_insensitive(".json"); }

bool llmopt::looksLikeHFConfig(StringRef contents) {
  StringRef rest = contents.ltrim();
  return rest.starts_with("{") && !rest.starts_with("{-#");
}

namespace {

/// Longest position table (max_position_embeddings, n_positions) accepted:
/// far beyond any released model, and small enough that sequence lengths,
/// tokens and their products stay exact.
constexpr int64_t kMaxPositions = int64_t(1) << 26;

/// Line and column (1-based) of byte `pos` of `text`.
std::pair<unsigned, unsigned> lineColOf(StringRef text, size_t pos) {
  StringRef before = text.take_front(pos);
  unsigned line = 1 + before.count('\n');
  size_t nl = before.rfind('\n');
  unsigned col = 1 + (nl == StringRef::npos ? pos : pos - nl - 1);
  return {line, col};
}

enum class Family { GPT2, Llama, Mistral, Mixtral, Qwen2 };

struct ArchInfo {
  StringRef architecture;
  StringRef modelType;
  Family family;
};

const ArchInfo kArchitectures[] = {
    {"GPT2LMHeadModel", "gpt2", Family::GPT2},
    {"LlamaForCausalLM", "llama", Family::Llama},
    {"MistralForCausalLM", "mistral", Family::Mistral},
    {"MixtralForCausalLM", "mixtral", Family::Mixtral},
    {"Qwen2ForCausalLM", "qwen2", Family::Qwen2},
};

/// Typed, located access to the fields of one config object. The first error
/// is emitted; later ones are suppressed so the user sees one clear message.
class ConfigReader {
public:
  ConfigReader(StringRef text, StringRef filename, const json::Object &obj, MLIRContext *ctx)
      : text(text), filename(filename), obj(obj), ctx(ctx) {}

  bool failed() const { return hasFailed; }

  /// Location of `"key"` in the file, or its first line when absent.
  Location locOf(StringRef key) const {
    std::string quoted = ("\"" + key + "\"").str();
    size_t pos = key.empty() ? StringRef::npos : text.find(quoted);
    unsigned line = 1, col = 1;
    if (pos != StringRef::npos)
      std::tie(line, col) = lineColOf(text, pos);
    return FileLineColLoc::get(ctx, filename, line, col);
  }

  /// Emits an error at `key` (once).
  InFlightDiagnostic error(StringRef key) {
    if (hasFailed) {
      // Swallow follow-on errors: the first explains the problem.
      InFlightDiagnostic d = emitError(locOf(key));
      d.abandon();
      return d;
    }
    hasFailed = true;
    return emitError(locOf(key));
  }

  bool has(StringRef key) const {
    const json::Value *v = obj.get(key);
    return v && v->kind() != json::Value::Null;
  }

  /// A positive integer field (`minValue` and up).
  int64_t getInt(StringRef key, std::optional<int64_t> dflt, StringRef what, int64_t minValue = 1) {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null) {
      if (dflt)
        return *dflt;
      error(key) << "missing required field '" << key << "' (" << what << ")";
      return minValue;
    }
    std::optional<int64_t> i = v->getAsInteger();
    if (!i) {
      if (v->kind() == json::Value::Number) {
        std::optional<double> d = v->getAsNumber();
        if (d && std::isfinite(*d) && std::trunc(*d) == *d)
          error(key) << "field '" << key << "' (" << what << ") is " << *d
                     << ", which does not fit in a 64-bit integer";
        else
          error(key) << "field '" << key << "' (" << what << ") must be an integer, got "
                     << llvm::formatv("{0}", *v).str();
      } else {
        error(key) << "field '" << key << "' (" << what << ") must be an integer, got "
                   << kindName(*v);
      }
      return minValue;
    }
    if (*i < minValue) {
      error(key) << "field '" << key << "' (" << what << ") must be "
                 << (minValue == 1 ? "positive" : ">= " + std::to_string(minValue)) << ", got "
                 << *i;
      return minValue;
    }
    return *i;
  }

  double getFloat(StringRef key, double dflt, StringRef what, bool positive = true) {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return dflt;
    std::optional<double> d = v->getAsNumber();
    if (!d) {
      error(key) << "field '" << key << "' (" << what << ") must be a number, got " << kindName(*v);
      return dflt;
    }
    if (!std::isfinite(*d)) {
      error(key) << "field '" << key << "' (" << what << ") must be a finite number, got " << *d;
      return dflt;
    }
    if (positive && !(*d > 0.0)) {
      error(key) << "field '" << key << "' (" << what << ") must be positive, got " << *d;
      return dflt;
    }
    return *d;
  }

  /// Rejects a position count (read from `key`) above kMaxPositions.
  void checkPositions(StringRef key, int64_t positions) {
    if (failed() || positions <= kMaxPositions)
      return;
    error(key) << "'" << key << "' (" << positions << ") is above " << kMaxPositions
               << " (2^26) positions, more than any model trains on; check "
                  "the field";
  }

  bool getBool(StringRef key, bool dflt) {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return dflt;
    std::optional<bool> b = v->getAsBoolean();
    if (!b) {
      error(key) << "field '" << key << "' must be true or false, got " << kindName(*v);
      return dflt;
    }
    return *b;
  }

  std::optional<std::string> getString(StringRef key) {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return std::nullopt;
    std::optional<StringRef> s = v->getAsString();
    if (!s) {
      error(key) << "field '" << key << "' must be a string, got " << kindName(*v);
      return std::nullopt;
    }
    return s->str();
  }

  /// Multiplies named sizes, failing with the names when the product
  /// overflows int64.
  int64_t product(ArrayRef<std::pair<StringRef, int64_t>> factors) {
    int64_t p = 1;
    for (auto [key, v] : factors) {
      if (llvm::MulOverflow<int64_t>(p, v, p)) {
        // Point at the overflowing field, or the first of them in the file
        // when that one is derived (head_dim from hidden_size / heads).
        StringRef at = key;
        if (!has(at))
          for (const auto &f : factors)
            if (has(f.first)) {
              at = f.first;
              break;
            }
        InFlightDiagnostic d = error(at);
        d << "sizes overflow 64 bits: ";
        SmallVector<std::pair<StringRef, int64_t>> named;
        for (const auto &f : factors)
          if (!f.first.empty())
            named.push_back(f);
        llvm::interleave(
            named, d,
            [&](const std::pair<StringRef, int64_t> &f) {
              d << "'" << f.first << "' (" << f.second << ")";
            },
            " x ");
        d << " is too large; check these fields";
        return 1;
      }
    }
    return p;
  }

  static StringRef kindName(const json::Value &v) {
    switch (v.kind()) {
    case json::Value::Null:
      return "null";
    case json::Value::Boolean:
      return "a boolean";
    case json::Value::Number:
      return "a number";
    case json::Value::String:
      return "a string";
    case json::Value::Array:
      return "an array";
    case json::Value::Object:
      return "an object";
    }
    return "a value";
  }

  StringRef text;
  StringRef filename;
  const json::Object &obj;
  MLIRContext *ctx;

private:
  bool hasFailed = false;
};

/// Normalized hyperparameters of every supported family.
struct ModelConfig {
  Family family = Family::Llama;
  std::string architecture;
  int64_t hidden = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t ffn = 0, vocab = 0, maxPositions = 0, seqLen = 0;
  double normEps = 1e-5, initStd = 0.02, ropeTheta = 10000.0;
  bool tied = false, qkvBias = false, outBias = false, mlpBias = false;
  GeluApprox gelu = GeluApprox::tanh;
  std::optional<int64_t> window;
  DictionaryAttr ropeScaling;
  int64_t experts = 0, topK = 0;
};

/// `rope_scaling.rope_type` values of transformers' ROPE_INIT_FUNCTIONS that
/// the importer records.
const StringRef kRopeTypes[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3"};
/// `rope_scaling` fields that are ratios or lengths, so positive.
const StringRef kPositiveRopeFields[] = {"factor", "low_freq_factor", "high_freq_factor",
                                         "original_max_position_embeddings"};

FailureOr<ModelConfig> readConfig(ConfigReader &r) {
  ModelConfig c;
  // Architecture: `architectures[0]`, else `model_type`.
  const ArchInfo *arch = nullptr;
  std::string archName;
  if (const json::Value *archs = r.obj.get("architectures");
      archs && archs->kind() != json::Value::Null) {
    const json::Array *list = archs->getAsArray();
    if (!list || list->empty() || !(*list)[0].getAsString()) {
      r.error("architectures") << "field 'architectures' must be a non-empty array of strings";
      return failure();
    }
    archName = (*list)[0].getAsString()->str();
    for (const ArchInfo &a : kArchitectures)
      if (a.architecture == archName)
        arch = &a;
    if (!arch) {
      r.error("architectures") << "unknown architecture '" << archName
                               << "' in field 'architectures': supported are GPT2LMHeadModel, "
                                  "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM and "
                                  "Qwen2ForCausalLM";
      return failure();
    }
  } else if (std::optional<std::string> mt = r.getString("model_type")) {
    for (const ArchInfo &a : kArchitectures)
      if (a.modelType == *mt)
        arch = &a;
    if (!arch) {
      r.error("model_type") << "unknown model_type '" << *mt
                            << "': supported are gpt2, llama, mistral, mixtral and qwen2";
      return failure();
    }
  } else {
    if (!r.failed())
      r.error("") << "no 'architectures' or 'model_type' field: cannot tell "
                     "which architecture this config describes";
    return failure();
  }
  c.family = arch->family;
  c.architecture = arch->architecture.str();

  if (c.family == Family::GPT2) {
    c.hidden = r.getInt("n_embd", std::nullopt, "model width");
    c.layers = r.getInt("n_layer", std::nullopt, "number of layers");
    c.heads = r.getInt("n_head", std::nullopt, "attention heads");
    c.kvHeads = c.heads;
    c.vocab = r.getInt("vocab_size", std::nullopt, "vocabulary size");
    std::optional<int64_t> ctxLen;
    if (r.has("n_ctx"))
      ctxLen = r.getInt("n_ctx", std::nullopt, "context length");
    c.maxPositions = r.getInt("n_positions", ctxLen, "maximum positions");
    r.checkPositions(r.has("n_positions") ? "n_positions" : "n_ctx", c.maxPositions);
    c.ffn = r.has("n_inner") ? r.getInt("n_inner", std::nullopt, "MLP width")
                             : r.product({{"n_embd", c.hidden}, {"", 4}});
    c.normEps = r.getFloat("layer_norm_epsilon", 1e-5, "layer norm epsilon");
    c.initStd = r.getFloat("initializer_range", 0.02, "init standard deviation");
    c.tied = r.getBool("tie_word_embeddings", true);
    std::string act = r.getString("activation_function").value_or("gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
      c.gelu = GeluApprox::tanh;
    else if (act == "gelu")
      c.gelu = GeluApprox::none;
    else if (!r.failed()) {
      r.error("activation_function") << "unsupported 'activation_function' '" << act
                                     << "': use gelu_new (tanh) or gelu (exact)";
      return failure();
    }
    c.qkvBias = c.outBias = c.mlpBias = true;
    if (!r.failed() && c.hidden % c.heads != 0) {
      r.error("n_head") << "'n_head' (" << c.heads << ") does not divide 'n_embd' (" << c.hidden
                        << ")";
      return failure();
    }
    c.headDim = c.hidden / c.heads;
    c.seqLen = c.maxPositions;
    return r.failed() ? FailureOr<ModelConfig>(failure()) : c;
  }

  // Llama family (Llama, Mistral, Mixtral, Qwen2).
  c.hidden = r.getInt("hidden_size", std::nullopt, "model width");
  c.layers = r.getInt("num_hidden_layers", std::nullopt, "number of layers");
  c.heads = r.getInt("num_attention_heads", std::nullopt, "attention heads");
  c.kvHeads = r.getInt("num_key_value_heads", c.heads, "key/value heads");
  c.ffn = r.getInt("intermediate_size", std::nullopt, "MLP width");
  c.vocab = r.getInt("vocab_size", std::nullopt, "vocabulary size");
  c.maxPositions = r.getInt("max_position_embeddings", std::nullopt, "maximum positions");
  r.checkPositions("max_position_embeddings", c.maxPositions);
  c.normEps = r.getFloat("rms_norm_eps", 1e-6, "RMS norm epsilon");
  c.initStd = r.getFloat("initializer_range", 0.02, "init standard deviation");
  c.ropeTheta = r.getFloat("rope_theta", 10000.0, "rotary base");
  c.tied = r.getBool("tie_word_embeddings", false);
  std::string act = r.getString("hidden_act").value_or("silu");
  if (act != "silu" && !r.failed()) {
    r.error("hidden_act") << "unsupported 'hidden_act' '" << act
                          << "': Llama-style MLPs here are SwiGLU (silu)";
    return failure();
  }
  c.qkvBias = c.family == Family::Qwen2 || r.getBool("attention_bias", false);
  c.outBias = c.family != Family::Qwen2 && r.getBool("attention_bias", false);
  c.mlpBias = r.getBool("mlp_bias", false);
  if (r.failed())
    return failure();
  if (r.has("head_dim")) {
    c.headDim = r.getInt("head_dim", std::nullopt, "head size");
  } else {
    if (c.hidden % c.heads != 0) {
      r.error("num_attention_heads")
          << "'num_attention_heads' (" << c.heads << ") does not divide 'hidden_size' (" << c.hidden
          << "); give 'head_dim' explicitly if that is intended";
      return failure();
    }
    c.headDim = c.hidden / c.heads;
  }
  if (c.heads % c.kvHeads != 0) {
    r.error("num_key_value_heads") << "'num_key_value_heads' (" << c.kvHeads
                                   << ") does not divide 'num_attention_heads' (" << c.heads << ")";
    return failure();
  }
  if (c.headDim % 2 != 0) {
    if (r.has("head_dim"))
      r.error("head_dim") << "'head_dim' (" << c.headDim
                          << ") is odd: rotary embeddings need an even head size";
    else
      r.error("num_attention_heads")
          << "head size 'hidden_size' / 'num_attention_heads' = " << c.hidden << " / " << c.heads
          << " = " << c.headDim
          << " is odd: rotary embeddings need an even head size; change "
             "'num_attention_heads' or give an even 'head_dim'";
    return failure();
  }
  r.product({{"num_attention_heads", c.heads},
             {r.has("head_dim") ? "head_dim" : "hidden_size / num_attention_heads", c.headDim}});

  // Sliding window: Mistral and Mixtral use it when set; Qwen2 only with
  // use_sliding_window.
  bool useWindow = c.family == Family::Mistral || c.family == Family::Mixtral ||
                   (c.family == Family::Qwen2 && r.getBool("use_sliding_window", false));
  if (useWindow && r.has("sliding_window")) {
    int64_t w = r.getInt("sliding_window", std::nullopt, "attention window");
    if (w < c.maxPositions)
      c.window = w;
  }

  c.seqLen = c.maxPositions;
  if (const json::Value *rs = r.obj.get("rope_scaling"); rs && rs->kind() != json::Value::Null) {
    const json::Object *o = rs->getAsObject();
    if (!o) {
      r.error("rope_scaling") << "field 'rope_scaling' must be an object or null";
      return failure();
    }
    SmallVector<NamedAttribute> entries;
    Builder b(r.ctx);
    for (const auto &kv : *o) {
      StringRef key = kv.first;
      const json::Value &v = kv.second;
      std::string field = ("rope_scaling." + key).str();
      if (key == "rope_type" || key == "type") {
        // `type` is the name older configs (Llama 2) use for `rope_type`.
        std::optional<StringRef> kind = v.getAsString();
        if (!kind || !llvm::is_contained(kRopeTypes, *kind)) {
          InFlightDiagnostic d = r.error(key);
          d << "field '" << field << "' must be one of ";
          llvm::interleaveComma(kRopeTypes, d, [&](StringRef t) { d << "\"" << t << "\""; });
          if (kind)
            d << ", got \"" << *kind << "\"";
          else
            d << ", got " << ConfigReader::kindName(v);
          return failure();
        }
        entries.push_back(b.getNamedAttr(key, b.getStringAttr(*kind)));
        continue;
      }
      if (key == "original_max_position_embeddings") {
        std::optional<int64_t> orig = v.getAsInteger();
        if (!orig || *orig <= 0) {
          r.error(key) << "field '" << field << "' must be a positive integer, got "
                       << llvm::formatv("{0}", v).str();
          return failure();
        }
        entries.push_back(b.getNamedAttr(key, b.getI64IntegerAttr(*orig)));
        // Train at the pre-extension length by default.
        c.seqLen = std::min(c.seqLen, *orig);
        continue;
      }
      if (std::optional<double> d = v.getAsNumber()) {
        bool mustBePositive = llvm::is_contained(kPositiveRopeFields, key);
        if (!std::isfinite(*d) || (mustBePositive && !(*d > 0.0))) {
          r.error(key) << "field '" << field << "' must be a finite"
                       << (mustBePositive ? " positive" : "") << " number, got " << *d;
          return failure();
        }
        // Factors stay floats even when written as 8 rather than 8.0.
        entries.push_back(b.getNamedAttr(key, b.getF64FloatAttr(*d)));
      } else if (std::optional<StringRef> str = v.getAsString()) {
        entries.push_back(b.getNamedAttr(key, b.getStringAttr(*str)));
      } else if (std::optional<bool> flag = v.getAsBoolean()) {
        entries.push_back(b.getNamedAttr(key, b.getBoolAttr(*flag)));
      } else if (const json::Array *list = v.getAsArray()) {
        // longrope's per-dimension long_factor / short_factor.
        SmallVector<double> values;
        for (const json::Value &e : *list) {
          std::optional<double> d = e.getAsNumber();
          if (!d || !std::isfinite(*d)) {
            r.error(key) << "field '" << field << "' must be an array of finite numbers";
            return failure();
          }
          values.push_back(*d);
        }
        entries.push_back(b.getNamedAttr(key, b.getF64ArrayAttr(values)));
      } else {
        r.error(key) << "field '" << field
                     << "' must be a number, a string, a boolean or an array "
                        "of numbers, got "
                     << ConfigReader::kindName(v);
        return failure();
      }
    }
    c.ropeScaling = b.getDictionaryAttr(entries);
    // What each type needs, as transformers' rope validation has it: a type,
    // and the fields its frequencies are computed from.
    StringRef type;
    if (auto t = c.ropeScaling.getAs<StringAttr>("rope_type"))
      type = t.getValue();
    else if (auto t = c.ropeScaling.getAs<StringAttr>("type"))
      type = t.getValue();
    if (type.empty() && !c.ropeScaling.empty()) {
      r.error("rope_scaling") << "field 'rope_scaling' needs 'rope_type' (one of \"default\", "
                                 "\"linear\", \"dynamic\", \"yarn\", \"longrope\", "
                                 "\"llama3\")";
      return failure();
    }
    SmallVector<StringRef> needed;
    if (type == "linear" || type == "dynamic" || type == "yarn")
      needed = {"factor"};
    else if (type == "llama3")
      needed = {"factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings"};
    else if (type == "longrope")
      needed = {"long_factor", "short_factor"};
    for (StringRef key : needed)
      if (!c.ropeScaling.get(key)) {
        r.error("rope_scaling") << "field 'rope_scaling." << key << "' is required for rope_type \""
                                << type << "\"";
        return failure();
      }
    if (type == "linear" || type == "dynamic" || type == "llama3")
      if (auto f = c.ropeScaling.getAs<FloatAttr>("factor"); f && f.getValueAsDouble() < 1) {
        r.error("rope_scaling") << "field 'rope_scaling.factor' must be at least 1 for "
                                   "rope_type \""
                                << type << "\", got " << f.getValueAsDouble();
        return failure();
      }
    // Dynamic NTK scaling changes nothing up to the model's length, which the
    // lowering then needs to know.
    if (type == "dynamic" && !c.ropeScaling.get("max_position_embeddings")) {
      SmallVector<NamedAttribute> withMax(c.ropeScaling.getValue());
      withMax.push_back(
          b.getNamedAttr("max_position_embeddings", b.getI64IntegerAttr(c.maxPositions)));
      c.ropeScaling = b.getDictionaryAttr(withMax);
    }
    if (type == "llama3") {
      double lo = c.ropeScaling.getAs<FloatAttr>("low_freq_factor").getValueAsDouble();
      double hi = c.ropeScaling.getAs<FloatAttr>("high_freq_factor").getValueAsDouble();
      if (!(hi > lo)) {
        r.error("rope_scaling") << "field 'rope_scaling.high_freq_factor' (" << hi
                                << ") must exceed 'low_freq_factor' (" << lo << ")";
        return failure();
      }
    }
  }

  if (c.family == Family::Mixtral) {
    c.experts = r.getInt("num_local_experts", std::nullopt, "number of experts");
    c.topK = r.getInt("num_experts_per_tok", std::nullopt, "experts per token");
    if (!r.failed() && c.topK > c.experts) {
      r.error("num_experts_per_tok") << "'num_experts_per_tok' (" << c.topK
                                     << ") exceeds 'num_local_experts' (" << c.experts << ")";
      return failure();
    }
  }
  return r.failed() ? FailureOr<ModelConfig>(failure()) : c;
}

/// Rejects configurations whose parameter count overflows 64 bits, or whose
/// layer count no real model has, before any IR is built.
LogicalResult checkTotalSize(ConfigReader &r, const ModelConfig &c) {
  constexpr int64_t kMaxLayers = 10000;
  StringRef layersKey = c.family == Family::GPT2 ? "n_layer" : "num_hidden_layers";
  StringRef hiddenKey = c.family == Family::GPT2 ? "n_embd" : "hidden_size";
  StringRef ffnKey = c.family == Family::GPT2 ? "n_inner" : "intermediate_size";
  StringRef headsKey = c.family == Family::GPT2 ? "n_head" : "num_attention_heads";
  // head_dim is a field only when the config gives it; otherwise name the
  // quotient it comes from.
  StringRef headDimKey = r.has("head_dim")          ? "head_dim"
                         : c.family == Family::GPT2 ? "n_embd / n_head"
                                                    : "hidden_size / num_attention_heads";
  if (c.layers > kMaxLayers) {
    r.error(layersKey) << "'" << layersKey << "' (" << c.layers << ") is above " << kMaxLayers
                       << ": no transformer is that deep; check the field";
    return failure();
  }
  // Upper bound of one layer's parameters: attention (q, k, v, o at most
  // 4 x hidden x heads*head_dim), MLP (3 x hidden x ffn, times the experts).
  int64_t attn =
      r.product({{"", 4}, {hiddenKey, c.hidden}, {headsKey, c.heads}, {headDimKey, c.headDim}});
  SmallVector<std::pair<StringRef, int64_t>> mlpFactors = {{"", 3}};
  if (c.family == Family::Mixtral)
    mlpFactors.push_back({"num_local_experts", c.experts});
  mlpFactors.append({{hiddenKey, c.hidden}, {ffnKey, c.ffn}});
  int64_t mlp = r.product(mlpFactors);
  int64_t layer = 0, total = 0;
  if (r.failed() || llvm::AddOverflow<int64_t>(attn, mlp, layer) ||
      llvm::MulOverflow<int64_t>(layer, c.layers, total)) {
    if (!r.failed())
      r.error(layersKey) << "the parameter count overflows 64 bits: '" << layersKey << "' ("
                         << c.layers << ") layers of '" << hiddenKey << "' (" << c.hidden
                         << ") and '" << ffnKey << "' (" << c.ffn << "); check these fields";
    return failure();
  }
  return success();
}

/// Emits the llm IR of one configuration.
class ModelBuilder {
public:
  ModelBuilder(MLIRContext *ctx, ConfigReader &reader, const ModelConfig &c, Type elt, Location loc)
      : b(ctx), reader(reader), c(c), elt(elt), loc(loc) {}

  OwningOpRef<ModuleOp> build(StringRef name) {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    module->getOperation()->setAttr("llm.name", b.getStringAttr(name));
    module->getOperation()->setAttr("llm.architecture", b.getStringAttr(c.architecture));
    module->getOperation()->setAttr("llm.seq_len", b.getI64IntegerAttr(c.seqLen));
    b.setInsertionPointToEnd(module->getBody());

    Type i32 = b.getI32Type();
    auto tokens = RankedTensorType::get({kDyn, kDyn}, i32);
    auto loss = RankedTensorType::get({}, b.getF32Type());
    auto func =
        func::FuncOp::create(b, loc, "forward", b.getFunctionType({tokens, tokens}, {loss}));
    func->setAttr(LLMDialect::kForwardAttrName, b.getUnitAttr());
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value tok = entry->getArgument(0), labels = entry->getArgument(1);

    bool gpt2 = c.family == Family::GPT2;
    Value wte = param(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight",
                      {{"vocab_size", c.vocab}, {gpt2 ? "n_embd" : "hidden_size", c.hidden}},
                      InitKind::normal, c.initStd);
    if (reader.failed())
      return nullptr;
    Value x = EmbeddingOp::create(b, loc, act(c.hidden), tok, wte);
    if (gpt2) {
      Value wpe =
          param("transformer.wpe.weight", {{"n_positions", c.maxPositions}, {"n_embd", c.hidden}},
                InitKind::normal, c.initStd / 2);
      x = PositionEmbeddingOp::create(b, loc, x.getType(), x, wpe);
    }
    for (int64_t i = 0; i < c.layers && !reader.failed(); ++i)
      x = gpt2 ? gpt2Layer(i, x) : llamaLayer(i, x);
    if (reader.failed())
      return nullptr;

    if (gpt2) {
      x = layerNorm("transformer.ln_f", x);
    } else {
      Value g = param("model.norm.weight", {{"hidden_size", c.hidden}}, InitKind::ones);
      x = RMSNormOp::create(b, loc, x.getType(), x, g, b.getF64FloatAttr(c.normEps));
    }
    Value head = c.tied
                     ? wte
                     : param("lm_head.weight",
                             {{"vocab_size", c.vocab}, {gpt2 ? "n_embd" : "hidden_size", c.hidden}},
                             InitKind::normal, c.initStd);
    Value logits = LMHeadOp::create(b, loc, act(c.vocab), x, head);
    Value l = CrossEntropyOp::create(b, loc, loss, logits, labels, b.getI64IntegerAttr(-100),
                                     /*vocab_axis=*/SymbolRefAttr(),
                                     /*vocab_size=*/IntegerAttr());
    func::ReturnOp::create(b, loc, l);
    if (reader.failed())
      return nullptr;
    return module;
  }

private:
  static constexpr int64_t kDyn = ShapedType::kDynamic;

  RankedTensorType act(int64_t features) {
    return RankedTensorType::get({kDyn, kDyn, features}, elt);
  }

  /// A parameter whose dimensions come from the named config fields; checks
  /// that their product, and the running total, fit in 64 bits.
  Value param(StringRef name, ArrayRef<std::pair<StringRef, int64_t>> dims, InitKind init,
              std::optional<double> stddev = std::nullopt) {
    int64_t numel = reader.product(dims);
    if (!reader.failed() && llvm::AddOverflow<int64_t>(total, numel, total))
      reader.error(c.family == Family::GPT2 ? "n_layer" : "num_hidden_layers")
          << "the parameter count overflows 64 bits at '" << name << "': check the size fields";
    SmallVector<int64_t> shape;
    for (auto &d : dims)
      shape.push_back(d.second);
    auto type = RankedTensorType::get(shape, elt);
    FloatAttr std = init == InitKind::normal ? b.getF64FloatAttr(*stddev) : FloatAttr();
    return ParamOp::create(b, loc, type, b.getStringAttr(name),
                           InitKindAttr::get(b.getContext(), init), std);
  }

  Value linear(Value x, StringRef prefix, int64_t in, int64_t out, bool bias, double stddev,
               bool transposed, StringRef inKey, StringRef outKey) {
    std::pair<StringRef, int64_t> inDim{inKey, in}, outDim{outKey, out};
    Value w = transposed
                  ? param((prefix + ".weight").str(), {inDim, outDim}, InitKind::normal, stddev)
                  : param((prefix + ".weight").str(), {outDim, inDim}, InitKind::normal, stddev);
    Value bv = bias ? param((prefix + ".bias").str(), {outDim}, InitKind::zeros) : Value();
    return LinearOp::create(b, loc, act(out), x, w, bv, transposed ? b.getUnitAttr() : UnitAttr(),
                            TypeAttr());
  }

  Value layerNorm(StringRef prefix, Value x) {
    Value g = param((prefix + ".weight").str(), {{"n_embd", c.hidden}}, InitKind::ones);
    Value bias = param((prefix + ".bias").str(), {{"n_embd", c.hidden}}, InitKind::zeros);
    return LayerNormOp::create(b, loc, x.getType(), x, g, bias, b.getF64FloatAttr(c.normEps));
  }

  Value attention(Value q, Value k, Value v) {
    IntegerAttr window = c.window ? b.getI64IntegerAttr(*c.window) : IntegerAttr();
    return AttentionOp::create(b, loc, q.getType(), q, k, v, b.getI64IntegerAttr(c.heads),
                               b.getI64IntegerAttr(c.kvHeads), b.getI64IntegerAttr(c.headDim),
                               b.getF64FloatAttr(1.0 / std::sqrt(static_cast<double>(c.headDim))),
                               b.getUnitAttr(), window);
  }

  /// Opens an llm.layer; returns it with the builder inside its body.
  LayerOp openLayer(int64_t i, Value x, Value &in) {
    auto layer = LayerOp::create(b, loc, x.getType(), b.getI64IntegerAttr(i), x);
    Block *body = b.createBlock(&layer.getBody(), {}, {x.getType()}, {loc});
    in = body->getArgument(0);
    return layer;
  }

  Value closeLayer(LayerOp layer, Value out) {
    YieldOp::create(b, loc, out);
    b.setInsertionPointAfter(layer);
    return layer.getResult();
  }

  Value gpt2Layer(int64_t i, Value x) {
    std::string p = "transformer.h." + std::to_string(i);
    double projStd = c.initStd / std::sqrt(2.0 * c.layers);
    Value in;
    LayerOp layer = openLayer(i, x, in);
    Value h = layerNorm(p + ".ln_1", in);
    Value qkv = linear(h, p + ".attn.c_attn", c.hidden, 3 * c.hidden, true, c.initStd, true,
                       "n_embd", "n_embd");
    Type t = act(c.hidden);
    auto split = SplitOp::create(b, loc, TypeRange{t, t, t}, qkv,
                                 b.getDenseI64ArrayAttr({c.hidden, c.hidden, c.hidden}));
    Value a = attention(split.getResult(0), split.getResult(1), split.getResult(2));
    Value o =
        linear(a, p + ".attn.c_proj", c.hidden, c.hidden, true, projStd, true, "n_embd", "n_embd");
    Value r1 = AddOp::create(b, loc, in.getType(), in, o);
    h = layerNorm(p + ".ln_2", r1);
    Value f =
        linear(h, p + ".mlp.c_fc", c.hidden, c.ffn, true, c.initStd, true, "n_embd", "n_inner");
    f = GeluOp::create(b, loc, f.getType(), f, GeluApproxAttr::get(b.getContext(), c.gelu));
    Value m =
        linear(f, p + ".mlp.c_proj", c.ffn, c.hidden, true, projStd, true, "n_inner", "n_embd");
    return closeLayer(layer, AddOp::create(b, loc, r1.getType(), r1, m));
  }

  Value llamaLayer(int64_t i, Value x) {
    std::string p = "model.layers." + std::to_string(i);
    Value in;
    LayerOp layer = openLayer(i, x, in);
    Value g1 = param(p + ".input_layernorm.weight", {{"hidden_size", c.hidden}}, InitKind::ones);
    Value h = RMSNormOp::create(b, loc, in.getType(), in, g1, b.getF64FloatAttr(c.normEps));
    int64_t qDim = c.heads * c.headDim, kvDim = c.kvHeads * c.headDim;
    Value q = linear(h, p + ".self_attn.q_proj", c.hidden, qDim, c.qkvBias, c.initStd, false,
                     "hidden_size", "num_attention_heads * head_dim");
    Value k = linear(h, p + ".self_attn.k_proj", c.hidden, kvDim, c.qkvBias, c.initStd, false,
                     "hidden_size", "num_key_value_heads * head_dim");
    Value v = linear(h, p + ".self_attn.v_proj", c.hidden, kvDim, c.qkvBias, c.initStd, false,
                     "hidden_size", "num_key_value_heads * head_dim");
    auto rot =
        RotaryOp::create(b, loc, q.getType(), k.getType(), q, k, b.getI64IntegerAttr(c.headDim),
                         b.getF64FloatAttr(c.ropeTheta), c.ropeScaling);
    Value a = attention(rot.getQOut(), rot.getKOut(), v);
    Value o = linear(a, p + ".self_attn.o_proj", qDim, c.hidden, c.outBias, c.initStd, false,
                     "num_attention_heads * head_dim", "hidden_size");
    Value r1 = AddOp::create(b, loc, in.getType(), in, o);
    Value g2 =
        param(p + ".post_attention_layernorm.weight", {{"hidden_size", c.hidden}}, InitKind::ones);
    h = RMSNormOp::create(b, loc, r1.getType(), r1, g2, b.getF64FloatAttr(c.normEps));
    Value m;
    if (c.family == Family::Mixtral) {
      std::string moe = p + ".block_sparse_moe";
      Value gate =
          param(moe + ".gate.weight", {{"num_local_experts", c.experts}, {"hidden_size", c.hidden}},
                InitKind::normal, c.initStd);
      auto probs = RankedTensorType::get({kDyn, kDyn, c.topK}, b.getF32Type());
      auto idx = RankedTensorType::get({kDyn, kDyn, c.topK}, b.getI32Type());
      auto router = MoERouterOp::create(b, loc, probs, idx, h, gate, b.getI64IntegerAttr(c.topK),
                                        b.getUnitAttr(), FloatAttr());
      auto rows = RankedTensorType::get({c.experts, kDyn, c.hidden}, elt);
      Value d = MoEDispatchOp::create(b, loc, rows, h, router.getIndices(), b.getF64FloatAttr(0.0));
      std::pair<StringRef, int64_t> e{"num_local_experts", c.experts},
          f{"intermediate_size", c.ffn}, hd{"hidden_size", c.hidden};
      Value w1 = param(moe + ".experts.*.w1.weight", {e, f, hd}, InitKind::normal, c.initStd);
      Value w3 = param(moe + ".experts.*.w3.weight", {e, f, hd}, InitKind::normal, c.initStd);
      Value w2 = param(moe + ".experts.*.w2.weight", {e, hd, f}, InitKind::normal, c.initStd);
      Value y =
          MoEExpertsOp::create(b, loc, rows, d, ValueRange{w1, w3, w2},
                               ExpertActivationAttr::get(b.getContext(), ExpertActivation::swiglu),
                               /*gemm=*/TypeAttr());
      m = MoECombineOp::create(b, loc, act(c.hidden), y, router.getWeights(), router.getIndices());
    } else {
      Value gt = linear(h, p + ".mlp.gate_proj", c.hidden, c.ffn, c.mlpBias, c.initStd, false,
                        "hidden_size", "intermediate_size");
      Value up = linear(h, p + ".mlp.up_proj", c.hidden, c.ffn, c.mlpBias, c.initStd, false,
                        "hidden_size", "intermediate_size");
      Value s = SwiGLUOp::create(b, loc, gt.getType(), gt, up);
      m = linear(s, p + ".mlp.down_proj", c.ffn, c.hidden, c.mlpBias, c.initStd, false,
                 "intermediate_size", "hidden_size");
    }
    return closeLayer(layer, AddOp::create(b, loc, r1.getType(), r1, m));
  }

  OpBuilder b;
  ConfigReader &reader;
  const ModelConfig &c;
  Type elt;
  Location loc;
  int64_t total = 0;
};

} // namespace

OwningOpRef<ModuleOp> llmopt::importHFConfig(StringRef text, StringRef filename, MLIRContext *ctx,
                                             const HFImportOptions &options) {
  ctx->loadDialect<LLMDialect, func::FuncDialect>();
  Location fileLoc = FileLineColLoc::get(ctx, filename, 1, 1);

  Type elt;
  if (options.dtype == "bf16")
    elt = BFloat16Type::get(ctx);
  else if (options.dtype == "f16")
    elt = Float16Type::get(ctx);
  else if (options.dtype == "f32")
    elt = Float32Type::get(ctx);
  else {
    emitError(fileLoc) << "unknown dtype '" << options.dtype
                       << "' (--hf-dtype): use bf16, f16 or f32";
    return nullptr;
  }

  if (std::optional<size_t> pos = findTooDeepBracket(text)) {
    auto [line, col] = lineColOf(text, *pos);
    emitError(FileLineColLoc::get(ctx, filename, line, col))
        << "malformed JSON: nested deeper than " << kMaxJSONDepth
        << " levels; a config.json is one object of mostly flat fields";
    return nullptr;
  }
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    std::string msg = llvm::toString(parsed.takeError());
    // llvm::json reports "[line:col, byte=N]: message".
    unsigned line = 1, col = 1;
    StringRef m(msg);
    if (m.consume_front("[")) {
      StringRef l = m.take_until([](char ch) { return ch == ':'; });
      m = m.drop_front(l.size() + 1);
      StringRef cpart = m.take_until([](char ch) { return ch == ','; });
      l.getAsInteger(10, line);
      cpart.getAsInteger(10, col);
      col = std::max(col, 1u);
      m = m.drop_until([](char ch) { return ch == ']'; }).drop_front(1).ltrim(": ");
    }
    emitError(FileLineColLoc::get(ctx, filename, line, col))
        << "malformed JSON: " << m << "; a config.json must be one JSON object";
    return nullptr;
  }
  const json::Object *obj = parsed->getAsObject();
  if (!obj) {
    emitError(fileLoc) << "expected a JSON object with the model's fields, got "
                       << ConfigReader::kindName(*parsed);
    return nullptr;
  }

  ConfigReader reader(text, filename, *obj, ctx);
  FailureOr<ModelConfig> config = readConfig(reader);
  if (failed(config) || failed(checkTotalSize(reader, *config)))
    return nullptr;

  std::string name = options.name;
  if (name.empty())
    name = filename == "<stdin>" ? "stdin" : llvm::sys::path::stem(filename).str();
  ModelBuilder builder(ctx, reader, *config, elt, fileLoc);
  OwningOpRef<ModuleOp> module = builder.build(name);
  if (!module || reader.failed())
    return nullptr;
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

static llvm::cl::opt<std::string>
    importDtype("hf-dtype", llvm::cl::desc("element type of imported models: bf16, f16 or f32"),
                llvm::cl::init("bf16"));

HFImportOptions llmopt::getHFImportOptionsFromCommandLine() {
  HFImportOptions opts;
  opts.dtype = importDtype;
  return opts;
}

void llmopt::registerHFImportTranslation() {
  static TranslateToMLIRRegistration reg(
      "import-hf", "import a Hugging Face config.json as llm IR",
      [](llvm::SourceMgr &sourceMgr, MLIRContext *ctx) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buf = sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        OwningOpRef<ModuleOp> m = importHFConfig(buf->getBuffer(), buf->getBufferIdentifier(), ctx,
                                                 getHFImportOptionsFromCommandLine());
        if (!m)
          return nullptr;
        return OwningOpRef<Operation *>(m.release().getOperation());
      },
      [](DialectRegistry &registry) { registry.insert<LLMDialect, func::FuncDialect>(); });
}

// Text operators: StringNormalizer (stopword removal and case change) and TfIdfVectorizer (n-gram counts
// with skips, TF / IDF / TFIDF weighting).
#include <algorithm>
#include <map>
#include <set>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

// ---------------------------------------------------------------- StringNormalizer

/// ASCII case mapping; other bytes (UTF-8 sequences) are left as they are.
std::string mapCase(std::string s, bool upper) {
  for (char& c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 128) c = static_cast<char>(upper ? std::toupper(u) : std::tolower(u));
  }
  return s;
}

std::string caseAction(const Node& node) {
  std::string a = node.attrString("case_change_action");
  if (a != "NONE" && a != "LOWER" && a != "UPPER")
    throw UserError(fmt::format("{}: case_change_action must be NONE, LOWER or UPPER, got '{}'", node.describe(), a));
  return a;
}

void inferStringNormalizer(InferContext& ctx) {
  caseAction(ctx.node());
  const TensorType& in = ctx.inputType(0);
  if (in.dtype != DType::String) ctx.fail("input must be a string tensor, found {}", dtypeName(in.dtype));
  if (in.hasRank() && !(in.rank() == 1 || (in.rank() == 2 && (*in.dims)[0] == Dim::known(1))))
    ctx.fail("input must be [C] or [1, C], found {}", in.toString());
  // The number of words kept depends on the data.
  std::vector<Dim> dims{Dim::unknown()};
  if (in.hasRank() && in.rank() == 2) dims.insert(dims.begin(), Dim::known(1));
  ctx.setOutputType(0, TensorType(DType::String, in.hasRank() ? std::optional(dims) : std::nullopt));
}

void stringNormalizerKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::String) ctx.fail("input must be a string tensor, found {}", dtypeName(x.dtype()));
  if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
    ctx.fail("input must be [C] or [1, C], got shape [{}]", fmt::join(x.shape(), ","));
  std::string action = caseAction(ctx.node());
  bool caseSensitive = ctx.attrInt("is_case_sensitive") != 0;
  std::set<std::string> stop;
  if (ctx.hasAttr("stopwords"))
    for (const auto& w : ctx.attrStrings("stopwords")) stop.insert(caseSensitive ? w : mapCase(w, false));
  std::vector<std::string> kept;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::string& w = x.data<std::string>()[i];
    if (stop.count(caseSensitive ? w : mapCase(w, false))) continue;
    kept.push_back(action == "NONE" ? w : mapCase(w, action == "UPPER"));
  }
  if (kept.empty()) kept.push_back("");  // ONNX keeps one empty string rather than an empty tensor
  Shape shape{static_cast<int64_t>(kept.size())};
  if (x.rank() == 2) shape.insert(shape.begin(), 1);
  ctx.setOutput(0, Tensor::fromVector<std::string>(shape, kept));
}

// ---------------------------------------------------------------- TfIdfVectorizer

/// The n-gram pool of a TfIdfVectorizer: each n-gram (tokens as strings) -> output column.
struct NgramPool {
  std::map<std::vector<std::string>, int64_t> columns;
  int64_t width = 0;  ///< output columns: max(ngram_indexes) + 1
  int64_t minN = 1, maxN = 1, maxSkip = 0;
  enum class Mode { TF, IDF, TFIDF } mode = Mode::TF;
  std::vector<float> weights;
};

NgramPool readPool(const Node& node) {
  auto fail = [&](const std::string& m) -> UserError { return UserError(fmt::format("{}: {}", node.describe(), m)); };
  NgramPool p;
  p.minN = node.attrInt("min_gram_length");
  p.maxN = node.attrInt("max_gram_length");
  p.maxSkip = node.attrInt("max_skip_count");
  if (p.minN < 1 || p.maxN < p.minN)
    throw fail(fmt::format("need 1 <= min_gram_length ({}) <= max_gram_length ({})", p.minN, p.maxN));
  if (p.maxSkip < 0) throw fail(fmt::format("max_skip_count must be non-negative, got {}", p.maxSkip));
  std::string mode = node.attrString("mode");
  if (mode == "TF") p.mode = NgramPool::Mode::TF;
  else if (mode == "IDF") p.mode = NgramPool::Mode::IDF;
  else if (mode == "TFIDF") p.mode = NgramPool::Mode::TFIDF;
  else throw fail(fmt::format("mode must be TF, IDF or TFIDF, got '{}'", mode));
  std::vector<std::string> pool;
  if (node.hasAttr("pool_strings")) pool = node.attrStrings("pool_strings");
  else if (node.hasAttr("pool_int64s"))
    for (int64_t v : node.attrInts("pool_int64s")) pool.push_back(std::to_string(v));
  else throw fail("needs pool_strings or pool_int64s");
  std::vector<int64_t> counts = node.attrInts("ngram_counts"), indexes = node.attrInts("ngram_indexes");
  // ngram_counts[i] is where the (i+1)-grams start in the pool.
  size_t ngram = 0;
  for (size_t level = 0; level < counts.size(); ++level) {
    auto n = static_cast<int64_t>(level + 1);
    int64_t begin = counts[level], end = level + 1 < counts.size() ? counts[level + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size()) || (end - begin) % n != 0)
      throw fail(fmt::format("ngram_counts {} do not split a pool of {} tokens into whole n-grams", fmt::join(counts, ","), pool.size()));
    for (int64_t at = begin; at < end; at += n, ++ngram) {
      if (ngram >= indexes.size()) throw fail(fmt::format("ngram_indexes has {} entries, fewer than the pool's n-grams", indexes.size()));
      std::vector<std::string> key(pool.begin() + at, pool.begin() + at + n);
      p.columns[key] = indexes[ngram];
    }
  }
  for (int64_t i : indexes) {
    if (i < 0) throw fail(fmt::format("ngram_indexes holds negative index {}", i));
    p.width = std::max(p.width, i + 1);
  }
  if (node.hasAttr("weights")) {
    p.weights = node.attrFloats("weights");
    if (static_cast<int64_t>(p.weights.size()) < p.width)
      throw fail(fmt::format("weights has {} values for {} output columns", p.weights.size(), p.width));
  }
  return p;
}

void inferTfIdf(InferContext& ctx) {
  NgramPool p = readPool(ctx.node());
  const TensorType& in = ctx.inputType(0);
  if (in.dtype != DType::String && in.dtype != DType::Int32 && in.dtype != DType::Int64)
    ctx.fail("input must be string, int32 or int64, found {}", dtypeName(in.dtype));
  if (in.hasRank() && in.rank() != 1 && in.rank() != 2) ctx.fail("input must be [C] or [N, C], found {}", in.toString());
  if (!in.hasRank()) return ctx.setOutputType(0, TensorType(DType::Float32, std::nullopt));
  std::vector<Dim> dims{Dim::known(p.width)};
  if (in.rank() == 2) dims.insert(dims.begin(), (*in.dims)[0]);
  ctx.setOutputType(0, TensorType(DType::Float32, dims));
}

std::vector<std::string> tokensOf(const Tensor& x) {
  if (x.dtype() == DType::String) return {x.data<std::string>(), x.data<std::string>() + x.numel()};
  std::vector<std::string> out;
  for (int64_t v : x.toInt64Vector()) out.push_back(std::to_string(v));
  return out;
}

/// Counts every n-gram of one row: n tokens taken every (skip + 1) positions, for each skip in
/// [0, max_skip_count]; unigrams are counted once (skips do not apply to them).
void countRow(const NgramPool& p, const std::string* row, int64_t len, float* counts) {
  for (int64_t skip = 0; skip <= p.maxSkip; ++skip)
    for (int64_t start = 0; start < len; ++start)
      for (int64_t n = p.minN; n <= p.maxN; ++n) {
        if (n == 1 && skip > 0) continue;
        if (start + (n - 1) * (skip + 1) >= len) break;
        std::vector<std::string> key;
        for (int64_t k = 0; k < n; ++k) key.push_back(row[start + k * (skip + 1)]);
        if (auto it = p.columns.find(key); it != p.columns.end()) counts[it->second] += 1;
      }
}

void tfIdfKernel(KernelContext& ctx) {
  NgramPool p = readPool(ctx.node());
  const Tensor& x = ctx.input(0);
  if (x.rank() != 1 && x.rank() != 2) ctx.fail("input must be [C] or [N, C], got shape [{}]", fmt::join(x.shape(), ","));
  if (x.dtype() != DType::String && x.dtype() != DType::Int32 && x.dtype() != DType::Int64)
    ctx.fail("input must be string, int32 or int64, found {}", dtypeName(x.dtype()));
  std::vector<std::string> tokens = tokensOf(x);
  int64_t rows = x.rank() == 2 ? x.dim(0) : 1, len = x.dim(-1);
  Shape shape = x.rank() == 2 ? Shape{rows, p.width} : Shape{p.width};
  Tensor& y = ctx.allocateOutput(0, DType::Float32, shape);
  float* out = y.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out + r * p.width;
    countRow(p, tokens.data() + r * len, len, row);
    for (int64_t c = 0; c < p.width; ++c) {
      float w = p.weights.empty() ? 1.0f : p.weights[static_cast<size_t>(c)];
      if (p.mode == NgramPool::Mode::IDF) row[c] = row[c] > 0 ? w : 0.0f;
      else if (p.mode == NgramPool::Mode::TFIDF) row[c] *= w;
    }
  }
}

}  // namespace

TESSEL_REGISTER_OP(StringNormalizer) {
  return OpDef("StringNormalizer").inputs(1).outputs(1).since(10)
      .attr("case_change_action", AttrKind::String, std::string("NONE"))
      .attr("is_case_sensitive", AttrKind::Int, int64_t{0})
      .optionalAttr("locale", AttrKind::String)
      .optionalAttr("stopwords", AttrKind::Strings)
      .describe("removes stopwords, then changes case (NONE/LOWER/UPPER)")
      .infer(inferStringNormalizer)
      .kernel(stringNormalizerKernel)
      .cost(movementCost);
}

TESSEL_REGISTER_OP(TfIdfVectorizer) {
  return OpDef("TfIdfVectorizer").inputs(1).outputs(1).since(9)
      .requiredAttr("max_gram_length", AttrKind::Int)
      .requiredAttr("min_gram_length", AttrKind::Int)
      .requiredAttr("max_skip_count", AttrKind::Int)
      .requiredAttr("mode", AttrKind::String)
      .requiredAttr("ngram_counts", AttrKind::Ints)
      .requiredAttr("ngram_indexes", AttrKind::Ints)
      .optionalAttr("pool_int64s", AttrKind::Ints)
      .optionalAttr("pool_strings", AttrKind::Strings)
      .optionalAttr("weights", AttrKind::Floats)
      .describe("counts pool n-grams (with skips) per row; TF counts, IDF weights, or TFIDF products")
      .infer(inferTfIdf)
      .kernel(tfIdfKernel)
      .cost(movementCost);
}

}  // namespace tessel

// TfIdfVectorizer over integer tokens for generated code: n-gram counts of each row against a pool of
// n-grams planned at compile time, weighted TF, IDF or TFIDF.
#pragma once

#include <cstdint>

namespace tessel::rt {

enum class TfIdfMode { TF, IDF, TFIDF };

/// Rows of x [rows, len] -> y [rows, width]. The pool holds `grams` n-grams: gram g has gram_n[g] tokens at
/// gram_tokens[gram_first[g]...] and counts into column gram_column[g]. Every n-gram of n in [min_n, max_n]
/// taken every (skip + 1) tokens, skip in [0, max_skip], is counted; unigrams once (skips do not apply).
/// weights (width values) may be null (1).
template <class I>
void tfidf_vectorize(const I* x, int64_t rows, int64_t len, int64_t min_n, int64_t max_n, int64_t max_skip,
                     const int64_t* gram_tokens, const int64_t* gram_first, const int64_t* gram_n,
                     const int64_t* gram_column, int64_t grams, TfIdfMode mode, const float* weights, int64_t width,
                     float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const I* row = x + r * len;
    float* out = y + r * width;
    for (int64_t c = 0; c < width; ++c) out[c] = 0.0f;
    for (int64_t skip = 0; skip <= max_skip; ++skip)
      for (int64_t start = 0; start < len; ++start)
        for (int64_t n = min_n; n <= max_n; ++n) {
          if (n == 1 && skip > 0) continue;
          if (start + (n - 1) * (skip + 1) >= len) break;
          for (int64_t g = 0; g < grams; ++g) {
            if (gram_n[g] != n) continue;
            bool same = true;
            for (int64_t k = 0; k < n && same; ++k)
              same = static_cast<int64_t>(row[start + k * (skip + 1)]) == gram_tokens[gram_first[g] + k];
            if (same) {
              out[gram_column[g]] += 1.0f;
              break;
            }
          }
        }
    for (int64_t c = 0; c < width; ++c) {
      const float w = weights ? weights[c] : 1.0f;
      if (mode == TfIdfMode::IDF) out[c] = out[c] > 0 ? w : 0.0f;
      else if (mode == TfIdfMode::TFIDF) out[c] *= w;
    }
  }
}

}  // namespace tessel::rt

// Transpose of a dense row-major tensor. The permutation is first simplified (axes of size 1 dropped,
// axes that stay adjacent and in order merged), so e.g. a [1, T, H, d] -> [1, H, T, d] head split is a
// 3-axis problem whose innermost axis is kept: rows of d floats are copied. A batch of 2-D transposes is
// copied in tiles. Otherwise the output is walked in order with an odometer over the input strides.
#include "tessel/rt/transpose.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/rt/thread_pool.h"

namespace tessel::rt {
namespace {

struct Simplified {
  std::vector<int64_t> shape;  // input dims
  std::vector<int> perm;       // output axis k is input axis perm[k]
};

Simplified simplify(const int64_t* x_shape, const int64_t* perm, int rank) {
  // Drop size-1 axes, renumbering the others.
  std::vector<int> newIndex(rank, -1);
  Simplified s;
  for (int a = 0; a < rank; ++a)
    if (x_shape[a] != 1) {
      newIndex[a] = static_cast<int>(s.shape.size());
      s.shape.push_back(x_shape[a]);
    }
  std::vector<int> p;
  for (int k = 0; k < rank; ++k)
    if (newIndex[perm[k]] >= 0) p.push_back(newIndex[perm[k]]);
  // Merge output-adjacent axes that are input-adjacent in the same order.
  std::vector<std::vector<int>> groups;
  for (int a : p) {
    if (!groups.empty() && groups.back().back() + 1 == a)
      groups.back().push_back(a);
    else
      groups.push_back({a});
  }
  // Input order of the groups gives the merged input shape; the output order their permutation.
  std::vector<int> order(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) order[g] = static_cast<int>(g);
  std::vector<int> byInput = order;
  std::sort(byInput.begin(), byInput.end(), [&](int a, int b) { return groups[a][0] < groups[b][0]; });
  std::vector<int> inputPos(groups.size());
  Simplified out;
  for (size_t i = 0; i < byInput.size(); ++i) {
    inputPos[byInput[i]] = static_cast<int>(i);
    int64_t size = 1;
    for (int a : groups[byInput[i]]) size *= s.shape[a];
    out.shape.push_back(size);
  }
  for (size_t g = 0; g < groups.size(); ++g) out.perm.push_back(inputPos[g]);
  return out;
}

}  // namespace

void transpose(const float* x, const int64_t* x_shape, const int64_t* perm, int rank, float* y, ThreadPool* pool) {
  int64_t total = 1;
  for (int a = 0; a < rank; ++a) total *= x_shape[a];
  if (total == 0) return;
  const Simplified s = simplify(x_shape, perm, rank);
  const int r = static_cast<int>(s.shape.size());
  if (r <= 1) {  // the identity permutation after simplification
    std::memcpy(y, x, static_cast<size_t>(total) * sizeof(float));
    return;
  }
  std::vector<int64_t> stride(r, 1), ydims(r), ystride_in(r);
  for (int a = r - 2; a >= 0; --a) stride[a] = stride[a + 1] * s.shape[a + 1];
  for (int k = 0; k < r; ++k) ydims[k] = s.shape[s.perm[k]], ystride_in[k] = stride[s.perm[k]];
  // Rows of the output: everything but its innermost axis; each row is `inner` floats.
  const int64_t inner = ydims[r - 1], rows = total / inner, step = ystride_in[r - 1];
  // A batch of 2-D transposes: the output's last axis is strided in the input and its second-last axis is
  // the input's innermost (attention's K^T, NCHW <-> NHWC). Copied in kTile x kTile tiles, so that reads and
  // writes both use whole cache lines, instead of one strided gather per output row (ViT-B/16's
  // 12 x 197 x 64 K^T: 0.15 ms a call before).
  constexpr int64_t kTile = 16;
  if (step != 1 && ystride_in[r - 2] == 1 && ydims[r - 2] >= kTile) {
    const int64_t A = ydims[r - 2], B = inner, outer = rows / A, a_tiles = (A + kTile - 1) / kTile;
    parallel_for(pool, outer * a_tiles, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / a_tiles, a0 = t % a_tiles * kTile, na = std::min(kTile, A - a0);
        int64_t off = 0, rem = o;  // input offset of outer index o (odometer over output axes 0 .. r-3)
        for (int k = r - 3; k >= 0; --k) {
          off += rem % ydims[k] * ystride_in[k];
          rem /= ydims[k];
        }
        const float* src = x + off + a0;  // element (a, b) at src[b * step + a]
        float* dst = y + (o * A + a0) * B;  // element (a, b) at dst[a * B + b]
        for (int64_t b0 = 0; b0 < B; b0 += kTile) {
          const int64_t b1 = std::min(B, b0 + kTile);
          for (int64_t b = b0; b < b1; ++b) {
            const float* col = src + b * step;
            for (int64_t a = 0; a < na; ++a) dst[a * B + b] = col[a];
          }
        }
      }
    });
    return;
  }
  parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
    // Input offset of output row r0 (odometer over the output's outer axes).
    std::vector<int64_t> idx(r - 1);
    int64_t rem = r0, off = 0;
    for (int k = r - 2; k >= 0; --k) {
      idx[k] = rem % ydims[k];
      rem /= ydims[k];
      off += idx[k] * ystride_in[k];
    }
    for (int64_t row = r0; row < r1; ++row) {
      float* dst = y + row * inner;
      if (step == 1) {
        std::memcpy(dst, x + off, static_cast<size_t>(inner) * sizeof(float));
      } else {
        const float* src = x + off;
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * step];
      }
      for (int k = r - 2; k >= 0; --k) {  // next output row
        off += ystride_in[k];
        if (++idx[k] < ydims[k]) break;
        off -= ydims[k] * ystride_in[k];
        idx[k] = 0;
      }
    }
  });
}

void gather_planes(const float* const* src, float* y, int64_t n, int64_t plane, ThreadPool* pool) {
  parallel_for(pool, n, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      if (src[p]) std::memcpy(y + p * plane, src[p], static_cast<size_t>(plane) * sizeof(float));
  });
}

}  // namespace tessel::rt

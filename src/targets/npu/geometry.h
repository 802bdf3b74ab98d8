// Shapes of the NPU's tiled operators as plain numbers (convolution incl. Gemm/MatMul as a 1x1 convolution
// over rows, pooling, element-wise tiles), read from a node; shared by the schedule builders and the lowering.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "tessel/ir/graph.h"

namespace tessel::npu {

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A 2-D convolution over an NHWC tensor (Gemm/MatMul: C = K, W = rows of A, M = N, 1x1 kernel).
struct ConvGeometry {
  int64_t N = 1, C = 1, H = 1, W = 1, M = 1, KH = 1, KW = 1;
  int64_t sH = 1, sW = 1, dH = 1, dW = 1, pT = 0, pL = 0, pB = 0, pR = 0, group = 1;
  int64_t OH = 1, OW = 1;
  bool depthwise() const { return group > 1 && group == C && group == M; }
  int64_t inRows(int64_t th) const { return (th - 1) * sH + (KH - 1) * dH + 1; }
  int64_t inCols(int64_t tw) const { return (tw - 1) * sW + (KW - 1) * dW + 1; }
  /// Words of one output pixel's receptive field per channel.
  int64_t windowWords() const { return ((KH - 1) * dH + 1) * ((KW - 1) * dW + 1); }
  int64_t macs() const { return N * OH * OW * M * (C / group) * KH * KW; }
  /// Rows and columns of stride phase (py, px) of the input window of a th x tw output tile when the window is
  /// split into ph x pw phases (phase rows py, py + ph, ...); 0 x 0 when no kernel tap reads that phase.
  std::pair<int64_t, int64_t> phaseExtent(int64_t ph, int64_t pw, int64_t py, int64_t px, int64_t th, int64_t tw) const;
  /// Kernel rows (kernel columns) that read stride phase py of ph rows (px of pw columns).
  int64_t rowTaps(int64_t ph, int64_t py) const;
  int64_t colTaps(int64_t pw, int64_t px) const;
};

/// How a matrix convolution lays out the reduction of one output pixel in its input region (the `variant` of
/// NodeTiling): one gemm per kernel tap and block of DIM channels ("matrix"); per kernel row, the (kernel column,
/// channel) pairs of a stride phase consecutive ("packed"); or every (kernel column, kernel row, channel) of a
/// stride phase consecutive, the loads stacking the kernel rows of each output row side by side ("stacked").
enum class Reduction { PerTap, Packed, Stacked };
Reduction reductionOf(const std::string& variant);

/// Geometry of a Conv, Gemm or MatMul node (shapes must be static).
ConvGeometry convGeometry(const Node& node);

/// `g` with every `pack` consecutive groups computed as one group (NodeTiling::groupPack): ceil(group / pack)
/// groups of pack times the channels, whose weights are block-diagonal (zeros between the original groups). When
/// pack does not divide the groups, the last packed group takes the last `pack` original groups, overlapping the
/// one before it (whose outputs it computes again, to the same values); C and M count the packed groups' channels.
ConvGeometry packGroups(ConvGeometry g, int64_t pack);
/// The groups of a grouped (not depthwise) convolution that one gemm block of a dim x dim array takes whole: the
/// fewest packed groups with pack x (input channels per group) <= dim and pack x (output channels per group) <=
/// dim, and for that count the smallest pack; 1 when not even two fit (or not grouped).
int64_t groupPackFor(const ConvGeometry& g, int64_t dim);

/// A MaxPool / AveragePool over an NHWC tensor.
struct PoolGeometry {
  int64_t N, C, H, W, KH, KW, sH, sW, pT, pL, OH, OW;
  bool isMax;
  int64_t inRows(int64_t th) const { return (th - 1) * sH + KH; }
  int64_t inCols(int64_t tw) const { return (tw - 1) * sW + KW; }
};
PoolGeometry poolGeometry(const Node& node);

/// The pixels x channels view of a tensor as the NPU stores it: rank 4 is NHWC (N*H*W pixels of C channels),
/// other ranks have the last axis as channels.
struct PixelView {
  int64_t pixels = 1, channels = 1;
};
PixelView pixelView(const Shape& shape);

}  // namespace tessel::npu

// Recurrent layers (ONNX RNN, GRU, LSTM) in portable C++: both layouts, forward/reverse/bidirectional,
// sequence lengths, initial states, LSTM peepholes and input_forget, GRU linear_before_reset, the ONNX
// activation functions with their alpha/beta, clip. Sums are accumulated in double (as the reference
// interpreter does).
#pragma once

#include <cstdint>

namespace tessel::rt {

enum class RnnCell : int32_t { Simple = 0, Gru = 1, Lstm = 2 };
/// ONNX's recurrent activation functions.
enum class RnnActivation : int32_t {
  Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus
};

/// Geometry and attributes of one recurrent node.
struct RnnShape {
  RnnCell cell = RnnCell::Lstm;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, directions = 1;
  bool reverse_only = false, batch_first = false, linear_before_reset = false, input_forget = false;
  float clip = 0;  ///< <= 0: no clipping
  /// Per direction: f (RNN), f g (GRU), f g h (LSTM), with their parameters.
  RnnActivation act[2][3] = {};
  float alpha[2][3] = {}, beta[2][3] = {};
};

/// x: [seq, batch, input] (batch_first: [batch, seq, input]); w: [dirs, gates*hidden, input];
/// r: [dirs, gates*hidden, hidden]; bias: [dirs, 2*gates*hidden] or null; seq_lens: [batch] or null;
/// init_h, init_c: [dirs, batch, hidden] ([batch, dirs, hidden]) or null; peep: [dirs, 3*hidden] or null.
/// Outputs y: [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden]), y_h and y_c like init_h; any may be
/// null. Returns false when a sequence length is outside [0, seq].
bool recurrent(const RnnShape& s, const float* x, const float* w, const float* r, const float* bias,
               const int32_t* seq_lens, const float* init_h, const float* init_c, const float* peep, float* y,
               float* y_h, float* y_c);

}  // namespace tessel::rt

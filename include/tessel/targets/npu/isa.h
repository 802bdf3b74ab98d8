// The virtual NPU's instruction set: units, buffers, opcodes, the Instruction record and its
// 256-bit binary encoding and text disassembly (specification: docs/npu.md).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::npu {

/// The four decoupled units; each runs its own in-order queue. Values are bit positions in token masks.
enum class Unit : uint8_t { Load = 0, Matrix = 1, Vector = 2, Store = 3 };
inline constexpr size_t kNumUnits = 4;

/// The four on-chip buffers (SRAM), each an array of float32 words.
enum class Buffer : uint8_t { Input = 0, Weight = 1, Accumulator = 2, Output = 3 };
inline constexpr size_t kNumBuffers = 4;

enum class Opcode : uint8_t {
  Sync = 0,       ///< no data: only waits for / signals tokens on `syncUnit`
  Load = 1,       ///< LD: DRAM -> SRAM, 3-D strided, zero padding on the fly
  Store = 2,      ///< ST: SRAM -> DRAM, 3-D strided
  Gemm = 3,       ///< MM: acc (+)= input rows x weight block
  VecBinary = 4,  ///< VEC: dst = a (op) b, element-wise
  VecUnary = 5,   ///< VEC: dst = f(a; imm0, imm1)
  VecAffine = 6,  ///< VEC: dst = a * scale[c] + bias[c] (per-channel)
  VecReduce = 7,  ///< VEC: dst[c] (op)= reduce over outer x inner of a[.., c]
};
inline constexpr uint8_t kNumOpcodes = 8;

/// Sub-operation of the vector opcodes.
enum class VecOp : uint8_t {
  // VecBinary
  Add = 0, Sub = 1, Mul = 2, Div = 3, Max = 4, Min = 5,
  MulAcc = 6,  ///< dst = dst + a * b (depthwise convolution taps)
  // VecUnary
  Copy = 16, Fill = 17, Relu = 18,
  Clip = 19,         ///< min(max(a, imm0), imm1)
  LeakyRelu = 20,    ///< a >= 0 ? a : a * imm0
  Scale = 21,        ///< a * imm0 + imm1
  Sigmoid = 22, Tanh = 23, Exp = 24,
  HardSigmoid = 25,  ///< max(0, min(1, a * imm0 + imm1))
  HardSwish = 26,    ///< a * max(0, min(1, a * imm0 + imm1))
  Erf = 27,          ///< erf(a), rational approximation (docs/npu.md, "Approximations")
  Gelu = 28,         ///< a * Phi(a) = 0.5 a (1 + erf(a / sqrt 2)), with the erf above
  GeluTanh = 29,     ///< 0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))) (Gelu's approximate="tanh")
  Silu = 30,         ///< a * sigmoid(a) (SiLU / swish: an epilogue's x * Sigmoid(x) in one op)
  Rsqrt = 31,        ///< 1 / sqrt(a * imm0 + imm1) (LayerNormalization's 1 / sqrt(variance + epsilon))
  // VecReduce
  ReduceSum = 32, ReduceMax = 33,
  // VecUnary, continued
  Sqrt = 34,         ///< sqrt(a) (a LayerNorm or RMSNorm left decomposed: the standard deviation)
  // VecAffine
  Affine = 48,
};

/// An SRAM operand: element (o, i, c) of an outer x inner x vecLen loop is at
/// addr + o * strideOuter + i * strideInner + c (all in float32 words).
struct SramOperand {
  Buffer buffer = Buffer::Input;
  uint32_t addr = 0;
  uint32_t strideOuter = 0;
  uint32_t strideInner = 0;
  bool operator==(const SramOperand&) const = default;
};

/// One instruction. Which fields are meaningful depends on the opcode (docs/npu.md lists them);
/// the others keep their defaults, which is what decode() produces for them.
struct Instruction {
  Opcode opcode = Opcode::Sync;
  uint8_t waitMask = 0;    ///< bit u: pop one token sent by unit u before starting
  uint8_t signalMask = 0;  ///< bit u: push one token to unit u when the results are visible
  Unit syncUnit = Unit::Load;  ///< Sync only: the queue it goes to

  uint32_t outer = 1, inner = 1, vecLen = 1;  ///< loop shape outer x inner x vecLen

  SramOperand dst;   ///< Load: destination; Gemm: accumulator rows; vector ops: destination
  SramOperand srcA;  ///< Store: source; Gemm: input rows; vector ops: first operand
  SramOperand srcB;  ///< Gemm: weight block (addr); VecBinary: second operand; VecAffine: scale vector
  SramOperand srcC;  ///< VecAffine: bias vector

  uint32_t dramAddr = 0;         ///< Load/Store: DRAM word address of element (0, 0, 0)
  uint32_t dramStrideOuter = 0;  ///< words between outer steps in DRAM
  uint32_t dramStrideInner = 0;  ///< words between inner steps in DRAM
  uint8_t padTop = 0, padBottom = 0, padLeft = 0, padRight = 0;  ///< Load: zero rows / vectors around the box

  uint32_t gemmK = 1;   ///< Gemm: reduction length (<= DIM): words per input row, rows of the weight block
  uint32_t gemmN = 1;   ///< Gemm: output columns (<= DIM): words per accumulator row
  bool accumulate = false;   ///< Gemm / VecReduce: add into dst instead of overwriting
  bool keepWeights = false;  ///< Gemm: reuse the weight block already in the array (no load, no DIM cycles)

  VecOp vecOp = VecOp::Add;
  float imm0 = 0, imm1 = 0;  ///< VecUnary immediates

  /// Field-wise equality; immediates compare bitwise so NaN payloads round-trip.
  bool operator==(const Instruction& other) const;

  /// The unit whose queue runs this instruction.
  Unit unit() const;
};

/// A program: instructions in dispatch order (each goes to its unit's queue in this order).
struct Program {
  std::vector<Instruction> instructions;
};

/// 256-bit encoded instruction, little-endian words.
using EncodedInstruction = std::array<uint64_t, 4>;

/// Packs an instruction; throws UserError naming the field when a value does not fit its bit width.
EncodedInstruction encode(const Instruction& inst);
/// Unpacks; throws UserError on an unknown opcode or sub-operation.
Instruction decode(const EncodedInstruction& bits);

/// Serialises a program as 32 bytes per instruction (little-endian) and back.
std::vector<uint8_t> encodeProgram(const Program& program);
Program decodeProgram(const std::vector<uint8_t>& bytes);

/// One readable line (no newline), e.g. `gemm  wait=LD signal=VEC acc[0:+16,+1] += inp[...] x wgt[0] k=16 n=16 rows=4x1`.
std::string disassemble(const Instruction& inst);
/// Whole program, one line per instruction prefixed by its index.
std::string disassemble(const Program& program);

std::string_view unitName(Unit u);      ///< LD, MM, VEC, ST
std::string_view bufferName(Buffer b);  ///< inp, wgt, acc, out
std::string_view opcodeName(Opcode op); ///< sync, load, store, gemm, vbin, vun, vaffine, vred
std::string_view vecOpName(VecOp op);   ///< add, relu, reduce_sum, ...
/// Whether a vector sub-op uses the slow path (vectorCyclesPerVectorComplex).
bool isComplexVecOp(VecOp op);
/// The vector sub-op whose name (vecOpName) is `name`, if any.
std::optional<VecOp> vecOpByName(std::string_view name);
/// Whether a sub-op belongs to VecUnary (one source, immediates imm0 and imm1).
bool isUnaryVecOp(VecOp op);

/// Bit widths of the encoded fields (limits the compiler must respect; docs/npu.md, "Encoding").
inline constexpr unsigned kSramAddrBits = 20, kStrideBits = 20, kCountBits = 16, kPadBits = 4;

}  // namespace tessel::npu

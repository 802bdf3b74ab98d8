/* The C ABI of a model compiled by `tessel compile` (a .so or an --emit-app project). Plain C so any
 * language can load it; the generated source includes this file and a copy travels with --emit-app. */
#ifndef TESSEL_CPU_ABI_H
#define TESSEL_CPU_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped whenever a signature below changes; the loader refuses other versions. */
#define TESSEL_ABI_VERSION 3

/** Element types (ONNX TensorProto codes). Buffers are dense, row-major, native endianness; BOOL is one
 * byte per element (0 or 1), FLOAT16/BFLOAT16 are the raw 16-bit patterns. */
#define TESSEL_DTYPE_FLOAT 1
#define TESSEL_DTYPE_UINT8 2
#define TESSEL_DTYPE_INT8 3
#define TESSEL_DTYPE_UINT16 4
#define TESSEL_DTYPE_INT16 5
#define TESSEL_DTYPE_INT32 6
#define TESSEL_DTYPE_INT64 7
#define TESSEL_DTYPE_BOOL 9
#define TESSEL_DTYPE_FLOAT16 10
#define TESSEL_DTYPE_DOUBLE 11
#define TESSEL_DTYPE_UINT32 12
#define TESSEL_DTYPE_UINT64 13
#define TESSEL_DTYPE_BFLOAT16 16

/** Describes one model input or output. */
typedef struct tessel_tensor_desc {
  const char* name;
  int32_t dtype;       /**< TESSEL_DTYPE_* */
  int32_t rank;
  const int64_t* dims; /**< rank entries, all known */
} tessel_tensor_desc;

/** Opaque model instance: packed weights, the activation arena and a thread pool. */
typedef struct tessel_model tessel_model;

/** ABI version the library was generated for (TESSEL_ABI_VERSION). */
int32_t tessel_abi_version(void);
/** Hex hash of the model graph, its weights and the target flags; `tessel run` shows and checks it. */
const char* tessel_model_hash(void);
int32_t tessel_model_num_inputs(void);
int32_t tessel_model_num_outputs(void);
const tessel_tensor_desc* tessel_model_input(int32_t index);
const tessel_tensor_desc* tessel_model_output(int32_t index);
/** Bytes of the activation arena and of the packed weights (the compile report prints them too). */
int64_t tessel_model_arena_bytes(void);
/** Floating-point operations of one inference (2 x multiply-adds of convolutions and GEMMs). */
double tessel_model_flops(void);
/** Vector ISA the library's code was built for: "avx2" or "avx512" (`tessel compile --isa`). Optional: a
 * library from before it has no such symbol. */
const char* tessel_model_isa(void);
/** Runs node `index` of the model's fallback list (operators without a compiled kernel) on dense
 * buffers of the element types its one-node model declares; returns 0 on success. Provided by the host
 * (`tessel run` passes the reference interpreter). */
typedef int32_t (*tessel_host_fn)(void* ctx, int32_t index, const void* const* inputs, void* const* outputs);
/** Number of nodes the model runs through the host, and each one as a one-node model in text IR with
 * its side data (large constants). */
int32_t tessel_model_num_fallbacks(void);
void tessel_model_fallback(int32_t index, const char** text, int64_t* text_bytes, const char** side,
                           int64_t* side_bytes);
/** Installs the host callback; tessel_model_run returns 1 when a fallback node runs without one. */
void tessel_model_set_host(tessel_model* model, tessel_host_fn fn, void* ctx);
/** One step of the generated run function: one kernel call (a fused chain counts once), in execution order. */
typedef struct tessel_step_info {
  const char* node;    /**< graph node the step computes (the first node of a fused chain) */
  const char* op;      /**< what it computes, e.g. "conv+bn+Relu", "MaxPool", "Gemm+Relu" */
  const char* kernel;  /**< runtime function it calls, e.g. "conv2d_winograd_f43_avx2" */
  int32_t rank;        /**< of the step's (first) output */
  const int64_t* dims;
  double flops;        /**< floating-point operations (2 x multiply-adds of convolutions and GEMMs; 0 otherwise) */
} tessel_step_info;
int32_t tessel_model_num_steps(void);
/** Step `index` (0 <= index < tessel_model_num_steps()), or NULL. */
const tessel_step_info* tessel_model_step(int32_t index);
/** Per-step timing. While `ns` is non-null every tessel_model_run writes num_steps + 1 doubles: ns[i] the
 * nanoseconds step i took, then ns[num_steps] the CLOCK_MONOTONIC time (ns) at which step 0 started. Steps
 * are timed back to back (one clock read between two steps), so step i started at ns[num_steps] + ns[0] +
 * ... + ns[i-1]. NULL (the default) turns it off; the run function then has no timing code at all. */
void tessel_model_set_profile(tessel_model* model, double* ns);
/** Creates an instance running on num_threads threads in total (<= 0: the default chosen at compile time with --threads, else all hardware threads); packs the
 * weights. Returns NULL when the CPU lacks AVX2/FMA or memory runs out. */
tessel_model* tessel_model_create(int32_t num_threads);
/** Runs one inference: inputs/outputs are dense row-major buffers of the descriptors' element types, in
 * descriptor order. Returns 0; 1 when a fallback node failed or had no host; 2 when an index input was
 * out of range (e.g. a Gather index past the table). */
int32_t tessel_model_run(tessel_model* model, const void* const* inputs, void* const* outputs);
/** Why the last tessel_model_run on this instance failed ("" after a success), e.g.
 * "node '/tok/Gather' (Gather): an index is out of range [-100, 100)". */
const char* tessel_model_error(const tessel_model* model);
void tessel_model_destroy(tessel_model* model);

#ifdef __cplusplus
}
#endif

#endif /* TESSEL_CPU_ABI_H */

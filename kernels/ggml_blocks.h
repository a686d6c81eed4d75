#pragma once
// llama.cpp's (ggml's) 32-element quantization blocks, byte for byte as ggml-common.h lays
// them out: little-endian fp16 scales first, then the high bits (q5), then the packed nibbles
// or bytes. A cache row of head_dim elements is head_dim/32 blocks back to back. The sizes are
// part of the contract with GGUF files and llama.cpp caches, hence the static_asserts.
#include <cstdint>

namespace kvgate::kernels::ggml {

inline constexpr int kBlock = 32;  // QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = QK4_NL

struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];   // x = qs * d
};
struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // element j in the low nibble of qs[j], element j+16 in the high nibble; x = (q - 8) * d
};
struct BlockQ4_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum; x = q * d + m
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // bit j of the little-endian u32 = 5th bit of element j
  uint8_t qs[16];  // low 4 bits, same nibble order as q4_0; x = (q - 16) * d
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];  // x = q * d + m
};
struct BlockIQ4_NL {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // 4-bit indices into kValuesIq4nl, q4_0 nibble order; x = d * kValuesIq4nl[i]
};

static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 is 34 bytes in ggml");
static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 is 18 bytes in ggml");
static_assert(sizeof(BlockQ4_1) == 20, "block_q4_1 is 20 bytes in ggml");
static_assert(sizeof(BlockQ5_0) == 22, "block_q5_0 is 22 bytes in ggml");
static_assert(sizeof(BlockQ5_1) == 24, "block_q5_1 is 24 bytes in ggml");
static_assert(sizeof(BlockIQ4_NL) == 18, "block_iq4_nl is 18 bytes in ggml");

// The non-linear 4-bit grid of iq4_nl (kvalues_iq4nl in ggml-common.h).
inline constexpr int8_t kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace kvgate::kernels::ggml

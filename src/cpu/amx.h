// Intel AMX for the bf16 forward (S = Q K^T and O += P V), opted in with FLASHTRAIN_CPU_AMX=1.
//
// Off by default until it has been verified on an AMX host: this code was written on a machine
// without AMX, where only its portable parts could run (VNNI packing, and the whole AMX forward
// with its tile products on EmulatedTiles, amx_tiles.h). When it is asked for but the compiler,
// the CPU or the kernel lacks AMX, the forward silently keeps its fp32 path.
//
// Declarations only (no intrinsics, no vector types), so tests can include this header.
#pragma once
#include <cstdint>

namespace flashtrain::cpu {

// Compiled with AMX support, the CPU reports AMX-TILE, AMX-BF16 and AVX-512F, the OS enables
// the tile state (XCR0), and Linux granted this process the tile data (arch_prctl
// ARCH_REQ_XCOMP_PERM). Checked once per process.
bool amx_available();

// How the bf16 forward runs its tile products, from FLASHTRAIN_CPU_AMX, read on every call (so a
// test can setenv between calls): "1" gives kHardware where amx_available() and kOff elsewhere;
// "emulate" gives kEmulated on any CPU: the AMX path's own packing, blocking and rounding with
// the tile instructions replaced by EmulatedTiles, so tests check that path everywhere (slow);
// anything else, or unset, gives kOff (the fp32 products of gemm.h).
enum class AmxMode { kOff, kHardware, kEmulated };
AmxMode amx_mode();

// Per-thread tile state for the lifetime of one parallel region: the constructor loads the tile
// configuration (every tile 16 rows x 64 bytes) when `on`, the destructor releases it.
class AmxThread {
 public:
  explicit AmxThread(bool on);
  ~AmxThread();
  AmxThread(const AmxThread&) = delete;
  AmxThread& operator=(const AmxThread&) = delete;

 private:
  bool on_;
};

// amx_gemm (amx_tiles.h) on the tile registers of this thread; only inside an AmxThread that is on.
void amx_gemm_tiles(float* c, int64_t ldc, bool accumulate, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, int64_t rows, int64_t k_pad, int64_t ncols);

// dst[i] = float_to_bf16(src[i]) (round to nearest even, NaN stays NaN) for i < n, with AVX-512F;
// only where amx_available() (or the CPU reports AVX-512F).
void round_to_bf16_avx512(const float* src, int64_t n, uint16_t* dst);

}  // namespace flashtrain::cpu

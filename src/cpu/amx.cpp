// AMX detection, per-thread tile configuration and the hardware tile operations (see amx.h).
// The functions that execute AMX or AVX-512 instructions carry target attributes, so the rest of
// the library keeps its own flags; they are compiled where GCC (>= 11, x86-64 Linux) has the AMX
// intrinsics, and only ever called once amx_available() is true. GCC's tile intrinsics are inline
// asm that any function may hold; Clang's are builtins that would need the target attribute on
// every caller (HardwareTiles), so Clang builds leave AMX out.
#include "amx.h"

#include <cstdlib>
#include <cstring>

#include "amx_tiles.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__has_include)
#if __has_include(<amxtileintrin.h>)
#define FLASHTRAIN_AMX_BUILT 1
#endif
#endif

#if FLASHTRAIN_AMX_BUILT
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace flashtrain::cpu {

AmxMode amx_mode() {
  const char* env = std::getenv("FLASHTRAIN_CPU_AMX");
  if (env == nullptr) return AmxMode::kOff;
  if (std::strcmp(env, "1") == 0) return amx_available() ? AmxMode::kHardware : AmxMode::kOff;
  if (std::strcmp(env, "emulate") == 0) return AmxMode::kEmulated;
  return AmxMode::kOff;
}

#if FLASHTRAIN_AMX_BUILT

namespace {

// CPUID.(EAX=7, ECX=0) bits, XCR0 state components and the Linux request for the tile data
// (asm/prctl.h, arch/x86/include/asm/fpu/types.h).
constexpr unsigned kEbxAvx512f = 1u << 16;
constexpr unsigned kEdxAmxBf16 = 1u << 22;
constexpr unsigned kEdxAmxTile = 1u << 24;
constexpr unsigned kEcxOsxsave = 1u << 27;  // CPUID.(EAX=1)
constexpr unsigned long long kXcr0Avx512 = 0xe6;              // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
constexpr unsigned long long kXcr0Tile = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

unsigned long long xcr0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & kEcxOsxsave)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(b & kEbxAvx512f) || !(d & kEdxAmxBf16) || !(d & kEdxAmxTile)) return false;
  const unsigned long long x = xcr0();
  if ((x & kXcr0Avx512) != kXcr0Avx512 || (x & kXcr0Tile) != kXcr0Tile) return false;
  // Linux >= 5.16 hands out the 8 KiB tile state only to processes that ask; without this the
  // first tile instruction raises SIGILL.
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long long permitted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) != 0) return false;
  return (permitted & (1ull << kXfeatureXtiledata)) != 0;
}

// LDTILECFG's 64-byte operand: palette 1, every tile kAmxRows rows of kAmxRowBytes bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

__attribute__((target("amx-tile"))) void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = static_cast<uint16_t>(kAmxRowBytes);
    cfg.rows[t] = static_cast<uint8_t>(kAmxRows);
  }
  // GCC's _tile_loadconfig names only 8 bytes of the operand as read: the barrier makes the
  // whole configuration be written first.
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

// The tile operations of amx_gemm on tmm0..tmm7. The intrinsics take the register number as a
// literal, hence the switches, which fold away once amx_gemm is inlined with its constants.
#define FT_AMX_EACH_TILE(OP) \
  OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7)
struct HardwareTiles {
  __attribute__((always_inline)) void load(int t, const void* p, int64_t stride) {
#define FT_AMX_LOAD(i) \
  case i: _tile_loadd(i, p, stride); break;
    switch (t) { FT_AMX_EACH_TILE(FT_AMX_LOAD) default: __builtin_unreachable(); }
#undef FT_AMX_LOAD
  }
  __attribute__((always_inline)) void store(int t, void* p, int64_t stride) {
#define FT_AMX_STORE(i) \
  case i: _tile_stored(i, p, stride); break;
    switch (t) { FT_AMX_EACH_TILE(FT_AMX_STORE) default: __builtin_unreachable(); }
#undef FT_AMX_STORE
  }
  __attribute__((always_inline)) void zero(int t) {
#define FT_AMX_ZERO(i) \
  case i: _tile_zero(i); break;
    switch (t) { FT_AMX_EACH_TILE(FT_AMX_ZERO) default: __builtin_unreachable(); }
#undef FT_AMX_ZERO
  }
  // amx_gemm pairs each accumulator with fixed A and B tiles; these are its four products.
  __attribute__((always_inline)) void dot(int c, int a, int b) {
    static_assert(kC00 == 0 && kC10 == 1 && kC01 == 2 && kC11 == 3 && kA0 == 4 && kA1 == 5 &&
                      kB0 == 6 && kB1 == 7,
                  "the literals below are amx_gemm's tile numbers");
    switch (c * 64 + a * 8 + b) {
      case 0 * 64 + 4 * 8 + 6: _tile_dpbf16ps(0, 4, 6); break;
      case 1 * 64 + 5 * 8 + 6: _tile_dpbf16ps(1, 5, 6); break;
      case 2 * 64 + 4 * 8 + 7: _tile_dpbf16ps(2, 4, 7); break;
      case 3 * 64 + 5 * 8 + 7: _tile_dpbf16ps(3, 5, 7); break;
      default: __builtin_unreachable();
    }
  }
};
#undef FT_AMX_EACH_TILE

}  // namespace

bool amx_available() {
  static const bool available = detect();
  return available;
}

AmxThread::AmxThread(bool on) : on_(on) {
  if (on_) configure_tiles();
}

AmxThread::~AmxThread() {
  if (on_) release_tiles();
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_gemm_tiles(
    float* c, int64_t ldc, bool accumulate, const uint16_t* a, int64_t lda, const uint16_t* b,
    int64_t ldb, int64_t rows, int64_t k_pad, int64_t ncols) {
  // TILELOADD's asm names no memory operand: every store to a, b and c must come first.
  __asm__ volatile("" ::: "memory");
  HardwareTiles t;
  amx_gemm(t, c, ldc, accumulate, a, lda, b, ldb, rows, k_pad, ncols);
}

// float_to_bf16, 16 lanes at a time. The masked forms with explicit sources avoid GCC 12's
// "undefined" source registers (-Wmaybe-uninitialized inside its headers).
__attribute__((target("avx512f"))) void round_to_bf16_avx512(const float* src, int64_t n,
                                                              uint16_t* dst) {
  constexpr __mmask16 kAll = 0xffff;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i high = _mm512_mask_srli_epi32(zero, kAll, bits, 16);
    const __m512i rounding = _mm512_add_epi32(half, _mm512_and_si512(high, one));
    __m512i r = _mm512_mask_srli_epi32(zero, kAll, _mm512_add_epi32(bits, rounding), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, high, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_mask_cvtepi32_epi16(_mm256_setzero_si256(), kAll, r));
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

#else  // no AMX intrinsics in this compiler: never available; the portable statements remain.

bool amx_available() { return false; }
AmxThread::AmxThread(bool on) : on_(on) {}
AmxThread::~AmxThread() { static_cast<void>(on_); }  // no tiles were configured

void amx_gemm_tiles(float* c, int64_t ldc, bool accumulate, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, int64_t rows, int64_t k_pad, int64_t ncols) {
  EmulatedTiles t;
  amx_gemm(t, c, ldc, accumulate, a, lda, b, ldb, rows, k_pad, ncols);
}

void round_to_bf16_avx512(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

#endif

}  // namespace flashtrain::cpu

// Tile-major fp32 copies of the inputs, made once per call (in parallel) so the inner loops never
// convert a dtype, transpose or copy: a key tile is read by every query tile of its head, and in
// the backward a query tile by every key tile. Memory is O(N * D), like the inputs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "amx_tiles.h"
#include "tiles.h"

namespace flashtrain::cpu {

// The tiles of `block` rows of every batch, numbered batch after batch.
struct TileGrid {
  std::vector<int64_t> first;        // first[b]: number of batch b's tile 0
  std::vector<int64_t> batch, row0;  // per tile
  TileGrid(const Problem& p, bool q_side, int64_t block) {
    for (int64_t b = 0; b < p.batch; ++b) {
      first.push_back(static_cast<int64_t>(batch.size()));
      const int64_t len = q_side ? p.seqlen_q(b) : p.seqlen_k(b);
      for (int64_t r = 0; r < len; r += block) {
        batch.push_back(b);
        row0.push_back(r);
      }
    }
  }
  int64_t size() const { return static_cast<int64_t>(batch.size()); }
};

// Uninitialised on purpose: every element is written by the parallel packing loop, which also
// places the pages near the threads that use them.
template <typename T = float>
std::unique_ptr<T[]> tile_storage(int64_t n) { return std::unique_ptr<T[]>(new T[n]); }

// k and v of every (batch, KV head, key tile), in the layouts the products read: kt [dqk][kBlockN]
// (transposed), k [kBlockN][ldq], v [kBlockN][ldv], vt [dv][kBlockN]; for the AMX forward (bf16
// inputs only) K^T and V as bf16 B operands in VNNI layout (amx_tiles.h), kt_vnni
// [kq / 2][kBlockN][2] with kq = dqk rounded up to whole tiles and v_vnni [kBlockN / 2][ldv][2].
// Rows past the sequence end and padding columns are zero.
struct KeyTiles {
  enum Part { kKt = 1, kK = 2, kV = 4, kVt = 8, kKtVnni = 16, kVVnni = 32 };
  int64_t dqk, dv, ldq, ldv, kq, heads;
  TileGrid grid;
  std::unique_ptr<float[]> kt, k, v, vt;
  std::unique_ptr<uint16_t[]> kt_vnni, v_vnni;

  KeyTiles(const Problem& p, int parts)
      : dqk(p.dim_qk), dv(p.dim_v), ldq(padded(dqk)), ldv(padded(dv)), kq(amx_k_padded(dqk)),
        heads(p.heads_k), grid(p, false, kBlockN) {
    const int64_t tiles = grid.size() * heads;
    if (parts & kKt) kt = tile_storage(tiles * dqk * kBlockN);
    if (parts & kK) k = tile_storage(tiles * kBlockN * ldq);
    if (parts & kV) v = tile_storage(tiles * kBlockN * ldv);
    if (parts & kVt) vt = tile_storage(tiles * dv * kBlockN);
    if (parts & kKtVnni) kt_vnni = tile_storage<uint16_t>(tiles * kq * kBlockN);
    if (parts & kVVnni) v_vnni = tile_storage<uint16_t>(tiles * kBlockN * ldv);
#pragma omp parallel
    {
      std::vector<float> kbuf(kBlockN * ldq), vbuf(kBlockN * ldv);
#pragma omp for schedule(static)
      for (int64_t id = 0; id < tiles; ++id) {
        const int64_t t = id / heads, kh = id % heads, b = grid.batch[t], col0 = grid.row0[t];
        const int64_t n = std::min(kBlockN, p.seqlen_k(b) - col0);
        load_tile(p.k, element_offset(p, p.sk, false, b, col0, kh), p.sk.seq, n, dqk, ldq, kbuf.data());
        load_tile(p.v, element_offset(p, p.sv, false, b, col0, kh), p.sv.seq, n, dv, ldv, vbuf.data());
        std::fill(kbuf.begin() + n * ldq, kbuf.end(), 0.0f);
        std::fill(vbuf.begin() + n * ldv, vbuf.end(), 0.0f);
        if (kt) transpose_padded(kbuf.data(), n, dqk, ldq, kt_tile(id));
        if (k) std::copy(kbuf.begin(), kbuf.end(), k_tile(id));
        if (v) std::copy(vbuf.begin(), vbuf.end(), v_tile(id));
        if (vt) transpose_padded(vbuf.data(), n, dv, ldv, vt_tile(id));
        if (kt_vnni) pack_vnni(kbuf.data(), 1, ldq, dqk, kBlockN, kq, kBlockN, kt_vnni_tile(id));
        if (v_vnni) pack_vnni(vbuf.data(), ldv, 1, kBlockN, dv, kBlockN, ldv, v_vnni_tile(id));
      }
    }
  }
  int64_t id(int64_t b, int64_t kh, int64_t col0) const { return (grid.first[b] + col0 / kBlockN) * heads + kh; }
  float* kt_tile(int64_t id) const { return kt.get() + id * dqk * kBlockN; }
  float* k_tile(int64_t id) const { return k.get() + id * kBlockN * ldq; }
  float* v_tile(int64_t id) const { return v.get() + id * kBlockN * ldv; }
  float* vt_tile(int64_t id) const { return vt.get() + id * dv * kBlockN; }
  uint16_t* kt_vnni_tile(int64_t id) const { return kt_vnni.get() + id * kq * kBlockN; }
  uint16_t* v_vnni_tile(int64_t id) const { return v_vnni.get() + id * kBlockN * ldv; }
};

// What the backward reads of every (batch, query head, query tile): q multiplied by the softmax
// scale [kBlockM][ldq], dO [kBlockM][ldv], the saved lse and D = rowsum(dO * O) in fp32 (the
// preprocess step). Rows past the sequence end are zero, their lse -inf.
struct QueryTiles {
  int64_t ldq, ldv, heads;
  TileGrid grid;
  std::unique_ptr<float[]> q, dout, lse, d;

  explicit QueryTiles(const Problem& p)
      : ldq(padded(p.dim_qk)), ldv(padded(p.dim_v)), heads(p.heads_q), grid(p, true, kBlockM) {
    const int64_t dqk = p.dim_qk, dv = p.dim_v, tiles = grid.size() * heads;
    q = tile_storage(tiles * kBlockM * ldq);
    dout = tile_storage(tiles * kBlockM * ldv);
    lse = tile_storage(tiles * kBlockM);
    d = tile_storage(tiles * kBlockM);
    const float scale = static_cast<float>(p.scale);
#pragma omp parallel
    {
      std::vector<float> o(kBlockM * ldv);
#pragma omp for schedule(static)
      for (int64_t id = 0; id < tiles; ++id) {
        const int64_t t = id / heads, h = id % heads, b = grid.batch[t], row0 = grid.row0[t];
        const int64_t m = std::min(kBlockM, p.seqlen_q(b) - row0);
        float* qt = q_tile(id);
        float* gt = dout_tile(id);
        load_tile(p.q, element_offset(p, p.sq, true, b, row0, h), p.sq.seq, m, dqk, ldq, qt);
        scale_tile(qt, m, ldq, scale);
        load_tile(p.dout, element_offset(p, p.sdo, true, b, row0, h), p.sdo.seq, m, dv, ldv, gt);
        load_tile(p.out, element_offset(p, p.so, true, b, row0, h), p.so.seq, m, dv, ldv, o.data());
        std::fill(qt + m * ldq, qt + kBlockM * ldq, 0.0f);
        std::fill(gt + m * ldv, gt + kBlockM * ldv, 0.0f);
        const float* saved = static_cast<const float*>(p.lse.data);
        for (int64_t i = 0; i < kBlockM; ++i) {
          float acc = 0.0f;
          for (int64_t e = 0; i < m && e < dv; ++e) acc += o[i * ldv + e] * gt[i * ldv + e];
          d[id * kBlockM + i] = acc;
          lse[id * kBlockM + i] = i < m ? saved[lse_offset(p, b, row0 + i, h)] : kNegInf;
        }
      }
    }
  }
  int64_t id(int64_t b, int64_t h, int64_t row0) const { return (grid.first[b] + row0 / kBlockM) * heads + h; }
  float* q_tile(int64_t id) const { return q.get() + id * kBlockM * ldq; }
  float* dout_tile(int64_t id) const { return dout.get() + id * kBlockM * ldv; }
  const float* lse_tile(int64_t id) const { return lse.get() + id * kBlockM; }
  const float* d_tile(int64_t id) const { return d.get() + id * kBlockM; }
};

}  // namespace flashtrain::cpu

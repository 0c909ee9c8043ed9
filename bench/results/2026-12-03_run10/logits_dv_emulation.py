# Issue 5, fp16 logits ~1e3 (CPU emulation, float64 with explicit fp32/fp16 roundings): what puts
# flashtrain's dV error at 2x the fp16 floor? Run: python3 bench/results/2026-12-03_run10/logits_dv_emulation.py
# (needs torch). Variants of the lse formula, and of the backward's S differing from the forward's.
import math, torch
torch.manual_seed(0)
B, H, S, D = 1, 4, 1024, 128
f16, f32, f64 = torch.float16, torch.float32, torch.float64
def r32(x): return x.to(f32).to(f64)
def r16(x): return x.to(f16).to(f64)
q = r16(torch.randn(B, H, S, D, dtype=f64) * 30); k = r16(torch.randn(B, H, S, D, dtype=f64) * 30)
dO = r16(torch.randn(B, H, S, D, dtype=f64))
scale = 1 / math.sqrt(D)
scale_f = r32(torch.tensor(scale, dtype=f64)).item()
log2e_f = r32(torch.tensor(1 / math.log(2), dtype=f64)).item()
ln2_f = r32(torch.tensor(math.log(2), dtype=f64)).item()
c = r32(torch.tensor(scale_f * log2e_f, dtype=f64)).item()   # scale_log2 as the kernels compute it
Sx = q @ k.transpose(-1, -2)                       # exact (fp16 inputs, fp64 sums of 128 products)
P64 = torch.softmax(Sx * scale, dim=-1)
dv64 = P64.transpose(-1, -2) @ dO
def err(dv): return ((dv - dv64).abs().max() / dv64.abs().max()).item()
print("floor (dv64 rounded to fp16): %.3e" % err(r16(dv64)))
def dv_from(s_bwd, lse_log2, round_p=True):
    P = r32(torch.exp2(r32(s_bwd * c - lse_log2)))   # fma: exact product, one rounding
    if round_p: P = r16(P)
    return r16(r32(P.transpose(-1, -2) @ dO))
s32 = r32(Sx)
def fwd_stats(s):
    m = s.max(dim=-1, keepdim=True).values
    m_s = r32(m * c)
    p = r32(torch.exp2(r32(s * c - m_s)))
    ssum = r32(p.sum(dim=-1, keepdim=True))
    return m, m_s, ssum
m, m_s, ssum = fwd_stats(s32)
lse_exact = r32(torch.logsumexp(Sx * scale, dim=-1, keepdim=True))
lse_ours = r32(r32(m_s + torch.log2(ssum)) * ln2_f)
lse_fa2 = r32(r32(m * scale_f) + torch.log(ssum))
lse2_direct = r32(m_s + torch.log2(ssum))              # lse in log2 units, never through ln
for name, lse in (("exact lse (fp32 natural)", lse_exact), ("ours (m_s + log2 sum) * ln2", lse_ours), ("FA2 m*scale + ln sum", lse_fa2)):
    lse2 = r32(lse * log2e_f)
    print("%-32s dv err %.3e   (P fp32: %.3e)   max |lse - exact| %.2e" % (name, err(dv_from(s32, lse2)), err(dv_from(s32, lse2, False)), (lse - torch.logsumexp(Sx * scale, dim=-1, keepdim=True)).abs().max().item()))
print("%-32s dv err %.3e" % ("lse kept in log2 units", err(dv_from(s32, lse2_direct))))
# S inconsistency: the backward's S differs from the forward's by an fp32-accumulation-sized error.
for ulps in (1, 4, 16):
    noise = (torch.rand_like(Sx) - 0.5) * 2 * ulps * torch.abs(Sx).clamp(min=1) * 2 ** -24
    s_bwd = r32(Sx + noise)
    print("S_bwd off by up to %2d ulp, ours lse: dv err %.3e" % (ulps, err(dv_from(s_bwd, r32(lse_ours * log2e_f)))))
# The same noise in both passes (consistent S, as when the forward and backward compute S the same
# way): does the accumulation error itself matter, or only the disagreement?
for ulps in (4, 16):
    noise = (torch.rand_like(Sx) - 0.5) * 2 * ulps * torch.abs(Sx).clamp(min=1) * 2 ** -24
    s_both = r32(Sx + noise)
    mb, msb, sumb = fwd_stats(s_both)
    lse_b = r32(r32(msb + torch.log2(sumb)) * ln2_f)
    print("S off by up to %2d ulp in both passes: dv err %.3e" % (ulps, err(dv_from(s_both, r32(lse_b * log2e_f)))))

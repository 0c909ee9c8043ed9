# Issue 5, fp16 logits ~1e3: a float64 emulation (numpy, explicit fp32/fp16 roundings) of the
# forward's online softmax over key tiles of 128, then the backward's dV from its lse. 'fma': the
# running sum rescaled by exp2(fma(old max, c, -new offset)) as nvcc contracted
# `row_max * scale_log2 - m_scaled` (the factor is 1 +- the offset's rounding residual even when
# the max did not move, and compounds over the tiles into lse); 'sub': exp2(fl(old max * c) - new
# offset), exactly 1 while the max stays. S is the exact q.k rounded to fp32 in both passes (the
# tensor cores compute it identically in the forward and the backward: wgmma_role_check).
# Run: python3 bench/results/2026-12-03_run11/rescale_emulation.py (output: rescale_emulation.txt)
import numpy as np
f32=np.float32; rng=np.random.default_rng(0)
H,S,D=4,1024,128
q=(rng.standard_normal((H,S,D))*30).astype(np.float16).astype(np.float64)
k=(rng.standard_normal((H,S,D))*30).astype(np.float16).astype(np.float64)
dO=(rng.standard_normal((H,S,D))).astype(np.float16).astype(np.float64)
scale=f32(1/np.sqrt(D)); c=f32(np.float64(scale)*np.float64(f32(1.4426950408889634)))
Sx=q@k.transpose(0,2,1)          # exact
S32=Sx.astype(f32)               # stand-in for the tensor-core S (same in both passes)
P64=np.exp((Sx-Sx.max(-1,keepdims=True))*np.float64(scale)); P64/=P64.sum(-1,keepdims=True)
dv64=P64.transpose(0,2,1)@dO
def err(dv): return np.abs(dv-dv64).max()/np.abs(dv64).max()
def ex2(x): return np.exp2(x.astype(np.float64)).astype(f32)
def fwd(mode, BN):
    m=np.full((H,S),-np.inf,f32); ssum=np.zeros((H,S),f32)
    for t in range(0,S,BN):
        st=S32[:,:,t:t+BN]
        mn=np.maximum(m,st.max(-1)); ms=(mn.astype(np.float64)*np.float64(c)).astype(f32)
        with np.errstate(invalid='ignore'):
            if mode=='fma': arg=(m.astype(np.float64)*np.float64(c)-ms).astype(f32)
            else: arg=((m.astype(np.float64)*np.float64(c)).astype(f32).astype(np.float64)-ms).astype(f32)
        osc=np.where(np.isneginf(m),f32(0),ex2(arg))
        p=ex2((st.astype(np.float64)*np.float64(c)-ms[...,None]).astype(f32))
        ssum=(ssum*osc+p.sum(-1,dtype=f32)).astype(f32); m=mn
    ms=(m.astype(np.float64)*np.float64(c)).astype(f32)
    return ((ms.astype(np.float64)+np.log2(ssum.astype(np.float64)))*np.log(2)).astype(f32)
lse_exact=(np.log(np.exp((Sx-Sx.max(-1,keepdims=True))*np.float64(scale)).sum(-1))+Sx.max(-1)*np.float64(scale))
for BN, kernel in ((128, "sm90 forward, 128-key tiles"), (64, "sm80 forward, 64-key tiles")):
  print(kernel)
  for mode in ('fma','sub'):
      lse=fwd(mode, BN); lse2=(lse.astype(np.float64)*1.4426950408889634).astype(f32)
      P=ex2((S32.astype(np.float64)*np.float64(c)-lse2[...,None]).astype(f32)).astype(np.float16).astype(np.float64)
      dv=(P.transpose(0,2,1)@dO).astype(f32).astype(np.float16).astype(np.float64)
      print(" ", mode, "max|lse-exact| %.2e"%np.abs(lse-lse_exact).max(), "dv err %.3e"%err(dv))
print("floor %.3e"%err(dv64.astype(np.float16).astype(np.float64)))

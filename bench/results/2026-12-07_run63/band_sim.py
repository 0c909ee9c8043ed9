"""Run 63's list-scheduling model of the causal wide D 256 backward's launch orders: each block
(80-key tile) costs a + its 64-row steps, blocks go in launch order to the first free of 132 SMs;
prints the useful fraction (steps over SMs x makespan) of bands of 4, 2, and bands before a last
band of their own. B * S = 16k tokens, 8 heads. Usage: python3 band_sim.py"""
import heapq, math
def run(order, S, a, sms=132, BM=64, BN=80):
    h=[0.0]*sms; useful=0
    for n in order:
        t=heapq.heappop(h); st=math.ceil(S/BM)-(n*BN)//BM; useful+=st; heapq.heappush(h,t+a+st)
    return useful/(sms*max(h))
def order_bands(S, bands, BN=80):
    nt=math.ceil(S/BN); o=[]
    for bsz in bands:
        for n in range(nt):
            o += [n]*bsz
    return o
for S in (2048,4096,8192,16384):
    units=16384//S*8
    res=[]
    for name,bands in (("b4",[4]*(units//4)),("b2",[2]*(units//2)),("b2+last4",[2]*((units-4)//2)+[4]),("b2+last8",[2]*((units-8)//2)+[8]) if units>8 else ("-",[units]),("b1+last4",[1]*(units-4)+[4])):
        res.append("%s %.3f"%(name,run(order_bands(S,bands),S,3)))
    print(S,units," | ".join(res))
print("rule+tail")
for S,rb in ((2048,3),(4096,1),(8192,1),(16384,1)):
    units=16384//S*8
    for tail in (4,8):
        head=units-tail; bands=[]; u=0
        while u<head: bands.append(min(rb,head-u)); u+=rb
        bands.append(tail)
        print(S, "b%d+last%d %.3f"%(rb,tail,run(order_bands(S,bands),S,3)))
print("tested")
for S in (2048,4096,8192,16384):
    units=16384//S*8
    r=[]
    for name,bands in (("4",[4]*(units//4)),("1/4",[1]*(units-4)+[4]),("1/8",[1]*(units-8)+[8] if units>8 else [units]),("8",[8]*(units//8))):
        r.append("%s %.3f"%(name,run(order_bands(S,bands),S,3)))
    print(S," | ".join(r))

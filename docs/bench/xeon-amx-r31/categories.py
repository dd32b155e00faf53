# python docs/bench/xeon-amx-r31/categories.py RESULT_DIR: the per-category lines of a headline run
"""Per-category table of a headline run (printed, for docs/benchmarks.md)."""
import sys, pandas as pd
d = sys.argv[1]
s = pd.read_csv(f"{d}/summary.csv")
r = pd.read_csv(f"{d}/runs.csv")
print("greedy equal:", int(r[r.method.str.contains('talon|eagle2|hybrid|^ar$')].matches_ar.sum()), "of", len(r[r.method.str.contains('talon|eagle2|hybrid|^ar$')]),
      "| hf_generate equal", int(r[r.method=='hf_generate'].matches_ar.sum()))
tot = s[s.category.isna() | (s.category=='all')] if 'category' in s else s
secs = r.groupby('method').seconds.sum()
print("x generate:", {m: round(secs['hf_generate']/secs[m],3) for m in secs.index})
print("hybrid+auto x prompt lookup", round(secs['hf_prompt_lookup']/secs['hybrid+auto'],3))
for m in ('talon+auto','hybrid+auto'):
    sub = s[s.method==m]
    chat = sub[sub.category=='chat'].mean_tree_nodes.values[0]
    chatd = sub[sub.category=='chat'].mean_depth.values[0]
    print(m)
    for _, x in sub.iterrows():
        e, re = x.mean_expected, x.mean_realised
        print(f"  {x.category:14s} x ar {x.speedup:.2f} nodes {x.mean_tree_nodes:.2f} x chat {x.mean_tree_nodes/chat:.2f} depth x chat {x.mean_depth/chatd:.2f} plain {x.plain_share*100:.0f}% E/real {e:.2f}/{re:.2f} ({(e/re-1)*100:+.1f}% ± {x.calibration_se*100 if x.calibration_se==x.calibration_se else float('nan'):.0f})")

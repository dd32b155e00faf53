"""The headline suite's tables for docs/benchmarks.md from a suite's summary.csv and runs.csv
(``python docs/bench/epyc-avx2-r40/headline_tables.py DIR``)."""
import sys

import pandas as pd

d = sys.argv[1]
s = pd.read_csv(f"{d}/summary.csv")
r = pd.read_csv(f"{d}/runs.csv")
a = s[s.category == "all"].set_index("method")
gen = a.loc["hf_generate", "seconds"]
print("| method | tokens/s | x ar | x generate() | MAT | draft nodes / step |")
for m, row in a.iterrows():
    print(f"| {m} | {row.tokens_per_s:.1f} | {row.ar_seconds / row.seconds:.2f} | {gen / row.seconds:.2f} | {row.MAT:.2f} | {row.mean_tree_nodes:.1f} |")
print("hybrid+auto x prompt lookup", round(a.loc["hf_prompt_lookup", "seconds"] / a.loc["hybrid+auto", "seconds"], 2))
ours = r[~r.method.str.startswith("hf_") & (r.method != "ar") & (r.temperature == 0)]
print("greedy runs of ours equal to ar:", int(ours.matches_ar.sum()), "of", len(ours))
g = r[r.method == "hf_generate"]
print("generate() equal to ar:", int(g.matches_ar.sum()), "of", len(g))
cats = [c for c in s.category.unique() if c != "all"] + ["all"]
for m in ("talon+auto", "hybrid+auto", "eagle2+auto"):
    t = s[s.method == m].set_index("category")
    chat = t.loc["chat"]
    print(f"\n{m}: | category | x ar | nodes x chat | depth x chat | plain steps | E / realised |")
    for c in cats:
        x = t.loc[c]
        e = (x.mean_expected / x.mean_realised - 1) * 100
        se = x.calibration_se * 100 if pd.notna(x.calibration_se) else float("nan")
        print(f"| {c} | {x.ar_seconds / x.seconds:.2f} | {x.mean_tree_nodes / chat.mean_tree_nodes:.2f} ({x.mean_tree_nodes:.2f}) "
              f"| {x.mean_depth / chat.mean_depth:.2f} | {x.plain_share * 100:.0f} % | {e:+.1f} % ± {se:.0f} |")
low = s[(s.category != "all") & s.method.isin(["talon+auto", "hybrid+auto", "eagle2+auto"])]
low = low.assign(x=low.ar_seconds / low.seconds).sort_values("x")
print("\nlowest categories (auto):", low[["method", "category", "x"]].head(3).to_string(index=False))

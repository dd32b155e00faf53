# python docs/bench/xeon-amx-r31/cost_rows.py COST_DIR...: one line per cost suite
import csv,glob,sys
for f in sys.argv[1:]:
    rows=list(csv.DictReader(open(f+'/cost.csv')))
    d={(r['component'],r['size']):float(r['ratio']) for r in rows}
    ar=[float(r['seconds']) for r in rows if r['component']=='ar'][0]
    print(f.split('/')[-1], f"ar {ar*1e3:.1f} ms", ' '.join(f"v{s}={d[('target',s)]:.2f}" for s in ['2','3','4','6','8','12','16','32','64','128']), f"head1={d[('head','1')]:.3f} head8={d[('head','8')]:.3f} first={d[('first_call','2')]:.3f}")

"""The app's UI pieces: what all users share (``shared``), one module per tab's handlers (``explore``,
``prompts``, ``tree_lab``, ``compare``, ``async_tab``, ``bench_tab``), the settings object (``settings``),
per-user state (``session``) and the one queue for model work (``compute``).  ``app.py`` lays the page out
and wires events to them.

Importing ``ui`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the environment already sets it, before anything
here imports torch (libgomp reads it when torch loads).  The app runs its model work one job at a time on
one OpenMP team (``ui.compute``); with the default active wait, that team's threads spin between parallel
regions, and when another process wants the same cores (a benchmark, another tenant) a spinning thread
holds a core its partner needs: on the 2-core machine a 9-step decode took 10.0–11.6 s that way next to a
CPU-heavy process, and 2.0–2.7 s with passive waiting (1,000 spins: 2.7 s; 10,000: 4.6 s); on the AVX2
EPYC next to one busy process TALON auto ran 16.5 tokens/s waiting passively and 7.9 with the default wait.
On a quiet machine passive waiting costs 10–20 % of a decode's tokens/s (TALON auto 17–21 against 22
there).  Cost curves are kept per wait setting (``talon.models.device.openmp_wait``), since a passive
wait makes every step dearer.  ``OMP_WAIT_POLICY=ACTIVE python app.py`` takes the other side of that
trade (docs/app.md)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

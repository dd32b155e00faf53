"""The app's UI pieces: what all users share (``shared``), the run tabs' handlers (``runs``), the
Benchmark tab (``bench_tab``).  ``app.py`` lays the page out and wires events to them."""

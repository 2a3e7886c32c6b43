"""``fencewatch report``: what moving the brokers to another commit check (KIP-1251) would change.

What lives here: :mod:`.summary` (streaming aggregation of verdict and alert records into one
JSON-ready summary, pure), :mod:`.alerts` (the expiry, truncation and alert sections),
:mod:`.timeline` (per-minute buckets with a bounded count), :mod:`.limits` (what the input could
not show), :mod:`.plots` (matplotlib, inline SVG), :mod:`.page` (one self-contained HTML file)
and :mod:`.compare` (a 4.2 run's prediction against a 4.3 run's answers). The command that reads
files or topics is ``streaming/commands/report.py``.
"""
